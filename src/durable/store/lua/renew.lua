--[[ Renews the leases of the deliveries a worker is running: each runs until Redis's now + lease.
  A delivery that no longer holds its task is refused and changes nothing: its claim token is
  not the task's current one (its lease ran out and a tick handed the task out again, or it was
  cancelled, moved, acknowledged or failed), or the task is not leased. A lease that ran out
  but that nothing has acted on yet (no tick, cancel or reschedule took the task since) is
  renewed: no other worker has the task.

  With a lease of 0 it gives the leases back instead: they run out now, and the next tick hands
  the tasks out again (a worker that drops its handlers at shutdown).

  Input:
    KEYS     the wheel's keys
    ARGV[1]  lease in ms (0: give the leases back)
    ARGV[2 + 2i], ARGV[3 + 2i]  per delivery: key, claim token
  Output:
    one digit per delivery, as one string: 1 renewed, 0 refused, 2 renewed and its cancel
    requested (cancel_running.lua: the worker cancels the handler's token).
  Keys: TASKS, LEASED, CANCELLING.

  Per call, not per delivery: one HMGET of the records, one ZMSCORE of the leases, one ZADD of
  the renewed ones under one lease end formatted once.
]]
-- @include keys
-- @include clock
-- @include record
-- @include hash_all
-- @include zadd_all
local lease = tonumber(ARGV[1])
-- The deliveries: a key then its claim token, from ARGV[DELIVERIES_FROM] on.
local DELIVERIES_FROM = 2

local _, up = clock()
-- One lease end for every delivery, formatted once.
local until_ms = string.format('%d', up + lease)
local out, renewed = {}, {}
local names, recs = records_of(ARGV, DELIVERIES_FROM, 2)
if #names == 0 then return '' end
local leased = {}
for i = 1, #names, 4000 do
  local part = redis.call('ZMSCORE', LEASED, unpack(names, i, math.min(i + 3999, #names)))
  for j = 1, #part do leased[#leased + 1] = part[j] end
end
-- The cancel requests of these deliveries, read only when there are any.
local cancelling = {}
if lease > 0 and redis.call('HLEN', CANCELLING) > 0 then cancelling = hmget_all(CANCELLING, names) end
for j, k in ipairs(names) do
  local rec, tok = recs[j], ARGV[DELIVERIES_FROM + 2 * j - 1]
  if rec and leased[j] and token_of(rec) == tok then
    renewed[#renewed + 1] = until_ms
    renewed[#renewed + 1] = k
    out[j] = cancelling[j] == tok and '2' or '1'
  else
    out[j] = '0'
  end
end
zadd_all(LEASED, renewed)
return table.concat(out)
