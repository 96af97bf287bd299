--[[ Puts a dead task back, due at once with its deliveries reset to 0 and a new request id. Safe
  to retry: a retry of a call that landed finds its request id on the task (or on the key's
  `done:` record, once the task has finished again) and answers 1 again.

  Input:
    KEYS[1]  the wheel's meta key
    ARGV[1]  key prefix   ARGV[2] key   ARGV[3] request id   ARGV[4] tick in ms
  Output:
    1 requeued, 0 no such dead letter, -1 a task with this key is pending.
  Keys: d:<key>, t:<key>, done:<key>, ready, dead, wake.
]]
-- @include keys
-- @include now_ms
-- @include due_tick
-- @include finished_by
-- @include wake
local k, rid, tick_ms = ARGV[2], ARGV[3], tonumber(ARGV[4])

local dk = dead_task_key(k)
local tk = task_key(k)
local p = redis.call('HGET', dk, 'p')
if not p then
  -- A retry whose first attempt landed (the task may have run since): it did requeue.
  if redis.call('HGET', tk, 'rid') == rid or finished_by(k, rid) then return 1 end
  return 0
end
if redis.call('EXISTS', tk) == 1 then return -1 end
local now = now_ms()
redis.call('HSET', tk, 'p', p, 'due', now, 'tick', due_tick(now, tick_ms), 'a', 0, 'rid', rid)
redis.call('ZADD', READY, now, k)
redis.call('DEL', dk)
redis.call('ZREM', DEAD, k)
wake()
return 1
