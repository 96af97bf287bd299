-- Frees the key of finished task `k`, remembering its request id for `ttl` ms so that a late
-- retry of its `schedule` is recognised instead of creating the task again.
-- Keys: t:<key>, leased, done:<key>.
-- @include keys
local function finish(k, ttl)
  local tk = task_key(k)
  local rid = redis.call('HGET', tk, 'rid')
  redis.call('DEL', tk)
  redis.call('ZREM', LEASED, k)
  if rid then redis.call('SET', done_key(k), rid, 'PX', ttl) end
end
