--[[ Deletes a dead letter for good.

  Input:
    KEYS     the wheel's keys
    ARGV[1]  key
  Output:
    1 deleted, 0 no such dead letter.
  Keys: DEAD_TASKS, DEAD.
]]
-- @include keys
local k = ARGV[1]

redis.call('ZREM', DEAD, k)
return redis.call('HDEL', DEAD_TASKS, k)
