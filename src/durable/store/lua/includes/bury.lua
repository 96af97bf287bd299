-- Moves task `k` (its record decoded as `t`) to the dead letters: its dead record (record.lua's
-- `encode_dead`) in DEAD_TASKS, its key in DEAD by when it died. The caller takes it out of TASKS
-- and CLAIMED and counts it.
-- Keys: DEAD_TASKS, DEAD.
-- @include keys
-- @include record
local function bury(k, t, err, now)
  redis.call('HSET', DEAD_TASKS, k, encode_dead(t, err))
  redis.call('ZADD', DEAD, now, k)
end
