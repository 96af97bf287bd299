-- The claims of the running tasks and their leases. CLAIMED holds the running tasks' keys scored
-- by their claim token (the order in which they were claimed); CLAIMS holds one member per claim
-- call, '<first token>:<tasks>:<claimed ms>:<node>' scored by its first token, the tokens of a
-- call being consecutive: when its tasks were claimed, and the id of the node whose worker
-- claimed them; LEASED holds the lease of each call that still has a task running, its first
-- token (as text) scored by the lease's end (ms on Redis's clock). One lease a call, not a task:
-- a call's tasks all go to one worker, which renews them together (renew.lua), so a claim writes
-- one lease entry and an acknowledgement none. A task is running while its record's token is not
-- 0 (it is then in CLAIMED under that token) and the lease of its call has not run out.
-- A claim writes all three (claim.lua), one entry a task and one a call, and drops the calls
-- older than the oldest task still in CLAIMED; whatever ends a task's run forgets it with
-- `forget_claims`, which drops the lease of a call left with no task.
-- Keys: CLAIMED, CLAIMS, LEASED.
-- @include keys
-- @include zrem_all
-- @include zadd_all
-- @include constants
-- The claim call that gave token `tok` (a number): its first token and how many it gave, or nil
-- when no recorded call gave it.
local function call_of(tok)
  local call = redis.call('ZREVRANGEBYSCORE', CLAIMS, tok, '-inf', 'LIMIT', 0, 1)[1]
  if not call then return nil end
  local first, n = string.match(call, '^(%d+):(%d+):')
  if not first then return nil end
  first, n = tonumber(first), tonumber(n)
  if tok >= first + n then return nil end
  return first, n
end
-- The calls that gave the tokens in `toks` (texts or numbers): the first token (as text) of
-- each call once, and per token the first token of its call (nil for a token no recorded call
-- gave). A token is looked up in
-- CLAIMS only when no call found so far gave it: the tokens a worker hands back come from a call
-- or two.
local function calls_of(toks)
  local firsts, of, lo, hi, m = {}, {}, {}, {}, 0
  for i = 1, #toks do
    local tok = tonumber(toks[i])
    local name
    for c = m, 1, -1 do
      if tok >= lo[c] and tok < hi[c] then
        name = firsts[c]
        break
      end
    end
    if not name then
      local first, n = call_of(tok)
      if first then
        m = m + 1
        lo[m], hi[m] = first, first + n
        name = string.format('%d', first)
        firsts[m] = name
      end
    end
    of[i] = name
  end
  return firsts, of
end
-- When the lease of the delivery under claim token `tok` (text, '0' for none) ends (ms), or 0
-- when it has none.
local function lease_end(tok)
  if not tok or tok == '0' then return 0 end
  local first = call_of(tonumber(tok))
  if not first then return 0 end
  return tonumber(redis.call('ZSCORE', LEASED, string.format('%d', first)) or 0)
end
-- Drops the lease of the call that gave token `tok` (a number) if that call holds no task any
-- more. Returns the call's first and end (one past its last) tokens, or nil.
local function drop_if_emptied(tok)
  local first, n = call_of(tok)
  if not first then return nil end
  if redis.call('ZCOUNT', CLAIMED, first, first + n - 1) == 0 then
    redis.call('ZREM', LEASED, string.format('%d', first))
  end
  return first, first + n
end
-- Forgets the claims of the tasks `names`, whose runs end (or go back): they leave CLAIMED, and
-- the calls that gave them lose their lease once none of their tasks is left. `toks`, their
-- claim tokens, are read from CLAIMED when not given. Two calls at most are looked at, a call
-- each, whatever it ends: those of the first and the last token given (a worker's
-- acknowledgements come in about the order of its claims, from a call or two). A call emptied
-- otherwise keeps its lease entry until it runs out, when the tick drops it with nothing to
-- hand out again (tick.lua).
local function forget_claims(names, toks)
  if #names == 0 then return end
  if not toks then
    toks = {}
    for _, tok in ipairs(zmscore_all(CLAIMED, names)) do
      if tok then toks[#toks + 1] = tok end
    end
  end
  zrem_all(CLAIMED, names)
  if #toks == 0 then return end
  local lo, hi = drop_if_emptied(tonumber(toks[1]))
  local last = tonumber(toks[#toks])
  if not lo or last < lo or last >= hi then drop_if_emptied(last) end
end
-- Records a claim call: `pairs` (claim token, key per task) in CLAIMED; the call itself, whose
-- `n` tokens start at `first`, in CLAIMS, and its lease until `until_ms` (text) in LEASED; then
-- drops the calls before the one that holds the oldest token still in CLAIMED (none of their
-- tasks runs).
local function record_claims(pairs, first, n, claimed_ms, node, until_ms)
  zadd_all(CLAIMED, pairs)
  local name = string.format('%d', first)
  redis.call('ZADD', CLAIMS, first, string.format('%s:%d:%s:%s', name, n, claimed_ms, node))
  redis.call('ZADD', LEASED, until_ms, name)
  local oldest = redis.call('ZRANGE', CLAIMED, 0, 0, 'WITHSCORES')[2]
  if oldest then
    local call = redis.call('ZREVRANGEBYSCORE', CLAIMS, oldest, '-inf', 'WITHSCORES', 'LIMIT', 0, 1)[2]
    if call then redis.call('ZREMRANGEBYSCORE', CLAIMS, '-inf', '(' .. call) end
  end
end
-- When the delivery under claim token `tok` (a string) was claimed and by which node, from
-- CLAIMS: `claimed ms, node`, or nil when its call is no longer recorded.
local function claim_of(tok)
  local call = redis.call('ZREVRANGEBYSCORE', CLAIMS, tok, '-inf', 'LIMIT', 0, 1)[1]
  if not call then return nil end
  local first, n, ms, node = string.match(call, '^(%d+):(%d+):(%d+):(.*)$')
  if not first or tonumber(tok) >= tonumber(first) + tonumber(n) then return nil end
  return ms, node
end
