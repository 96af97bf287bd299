--[[ Puts a dead task back, due at once with its deliveries reset to 0 and its own retry settings
  (if any) kept. Safe to retry: the answer is kept under the call's id (CALL_KEY), so a retry whose first attempt landed answers 1 again.

  Input:
    KEYS     the wheel's keys, then CALL_KEY
    ARGV[1]  key   ARGV[2] ms to keep the answer
  Output:
    1 requeued, 0 no such dead letter, -1 a task with this key is pending.
  Keys: CALL_KEY, DEAD_TASKS, DEAD, TASKS, READY, WAKE, UPSERTS.
]]
-- @include keys
-- @include clock
-- @include record
-- @include request
-- @include wake
-- @include queued
local k, ttl = ARGV[1], ARGV[2]

local kept = replayed()
if kept then return tonumber(kept) end
local out = 0
local dead = redis.call('HGET', DEAD_TASKS, k)
if dead then
  if redis.call('HEXISTS', TASKS, k) == 1 then
    out = -1
  else
    local now = clock()
    local d = decode_dead(dead)
    redis.call('HSET', TASKS, k, new_record(now, d.p, 0, 0, '0', '', '', d.retry))
    drop_queued({k})
    redis.call('ZADD', READY, now, k)
    redis.call('HDEL', DEAD_TASKS, k)
    redis.call('ZREM', DEAD, k)
    wake()
    out = 1
  end
end
remember(tostring(out), ttl)
return out
