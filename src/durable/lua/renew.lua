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
    one integer per delivery: 1 renewed, 0 refused.
  Keys: TASKS, LEASED.
]]
-- @include keys
-- @include clock
-- @include record
local lease = tonumber(ARGV[1])
-- The deliveries: a key then its claim token, from ARGV[DELIVERIES_FROM] on.
local DELIVERIES_FROM = 2

local _, up = clock()
local until_ms = up + lease
local out = {}
for i = DELIVERIES_FROM, #ARGV, 2 do
  local k, tok = ARGV[i], ARGV[i + 1]
  local rec = redis.call('HGET', TASKS, k)
  if rec and token_of(rec) == tok and redis.call('ZSCORE', LEASED, k) then
    redis.call('ZADD', LEASED, 'XX', until_ms, k)
    out[#out + 1] = 1
  else
    out[#out + 1] = 0
  end
end
return out
