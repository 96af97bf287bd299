-- Moves task `k` to the dead letters with its payload, deliveries and last error.
-- Keys: t:<key>, d:<key>, dead, meta, and those of finish.
-- @include keys
-- @include finish
local function bury(k, attempts, err, now, ttl)
  local p = redis.call('HGET', task_key(k), 'p') or ''
  redis.call('HSET', dead_task_key(k), 'p', p, 'a', attempts, 'err', err)
  redis.call('ZADD', DEAD, now, k)
  finish(k, ttl)
  redis.call('HINCRBY', META, 'dead_lettered', 1)
end
