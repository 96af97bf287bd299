--[[ Renews the leases of the deliveries a worker is running: the lease of each one's claim call
  (one for all the call's tasks: includes/claims.lua) runs until Redis's now + lease. A delivery
  that no longer holds its task is refused and changes nothing: its claim token is not the
  task's current one (its lease ran out and a tick handed the task out again, or it was
  cancelled, moved, acknowledged or failed), or its call has no lease. A lease that ran out but
  that nothing has acted on yet (no tick, cancel or reschedule took the task since) is renewed:
  no other worker has the task.

  With a lease of 0 it gives the deliveries back instead: they leave their calls (whose other
  tasks, still running, keep their lease) for a call of their own, under fresh claim tokens,
  whose lease has run out, and the next tick hands the tasks out again (a worker that drops its
  handlers at shutdown).

  Input:
    KEYS     the wheel's keys
    ARGV[1]  lease in ms (0: give the deliveries back)
    ARGV[2 + 2i], ARGV[3 + 2i]  per delivery: key, claim token
  Output:
    one digit per delivery, as one string: 1 renewed (or given back), 0 refused, 2 renewed and
    its cancel requested (cancel_running.lua: the worker cancels the handler's token).
  Keys: TASKS, LEASED, CLAIMED, CLAIMS, CANCELLING, SEQ.

  Per call, not per delivery: one HMGET of the records, a look-up and a ZADD per claim call.
]]
-- @include keys
-- @include clock
-- @include record
-- @include hash_all
-- @include zadd_all
-- @include claims
local lease = tonumber(ARGV[1])
-- The deliveries: a key then its claim token, from ARGV[DELIVERIES_FROM] on.
local DELIVERIES_FROM = 2

local _, up = clock()
local out = {}
local names, recs = records_of(ARGV, DELIVERIES_FROM, 2)
if #names == 0 then return '' end
local toks = {}
for j = 1, #names do toks[j] = ARGV[DELIVERIES_FROM + 2 * j - 1] end
local firsts, call_of_tok = calls_of(toks)
local leases = {}
for i, score in ipairs(zmscore_all(LEASED, firsts)) do leases[firsts[i]] = score end
-- The cancel requests of these deliveries, read only when there are any.
local cancelling = {}
if lease > 0 and redis.call('HLEN', CANCELLING) > 0 then cancelling = hmget_all(CANCELLING, names) end
local held, held_toks, held_recs, renewed, seen = {}, {}, {}, {}, {}
for j, k in ipairs(names) do
  local rec, tok, call = recs[j], toks[j], call_of_tok[j]
  if rec and call and leases[call] and token_of(rec) == tok then
    -- A key given twice is given back once.
    if not seen[k] then held[#held + 1], held_toks[#held + 1], held_recs[#held + 1] = k, tok, rec end
    seen[k] = true
    renewed[call] = true
    out[j] = cancelling[j] == tok and '2' or '1'
  else
    out[j] = '0'
  end
end
if lease > 0 then
  -- One lease end for every call, formatted once.
  local until_ms = string.format('%d', up + lease)
  local entries = {}
  for _, first in ipairs(firsts) do
    if renewed[first] then
      entries[#entries + 1] = until_ms
      entries[#entries + 1] = first
    end
  end
  zadd_all(LEASED, entries)
elseif #held > 0 then
  -- Given back: out of their calls, into one of their own (claimed when and by whom the first
  -- was) whose lease ends now, under fresh tokens.
  local ms, node = claim_of(held_toks[1])
  forget_claims(held, held_toks)
  local last = redis.call('INCRBY', SEQ, #held)
  local first = last - #held + 1
  local pairs, recs_out = {}, {}
  for j, k in ipairs(held) do
    local tok = string.format('%d', first + j - 1)
    recs_out[2 * j - 1], recs_out[2 * j] = k, with_token(held_recs[j], tok)
    pairs[2 * j - 1], pairs[2 * j] = tok, k
  end
  hset_all(TASKS, recs_out, 1)
  -- A cancel requested for a delivery given back follows it to its new token: the tick ends it
  -- as cancelled when its lease runs out (includes/cancelled.lua), rather than hand it out.
  if redis.call('HLEN', CANCELLING) > 0 then
    local asked = hmget_all(CANCELLING, held)
    for j, k in ipairs(held) do
      if asked[j] == held_toks[j] then redis.call('HSET', CANCELLING, k, pairs[2 * j - 1]) end
    end
  end
  record_claims(pairs, first, #held, ms or string.format('%d', up), node or '', string.format('%d', up))
end
return table.concat(out)
