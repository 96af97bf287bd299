-- Moves task `k` (its record decoded as `t`) to the dead letters: its due time, deliveries, last
-- error and payload in DEAD_TASKS (`<due ms>:<deliveries>:<error length>:<error><payload>`), its
-- key in DEAD by when it died. The caller takes it out of TASKS and LEASED and counts it.
-- Keys: DEAD_TASKS, DEAD.
-- @include keys
local function bury(k, t, err, now)
  redis.call('HSET', DEAD_TASKS, k, string.format('%d:%d:%d:', t.due, t.a, #err) .. err .. t.p)
  redis.call('ZADD', DEAD, now, k)
end
