-- Lets one idle worker know that tasks are ready (a worker that claims a full batch passes it
-- on). At most WAKE_TOKENS tokens wait, so a burst leaves only a few wake-ups with nothing to
-- claim behind it.
-- Keys: wake.
-- @include keys
-- @include constants
local function wake()
  redis.call('LPUSH', WAKE, 1)
  redis.call('LTRIM', WAKE, 0, WAKE_TOKENS - 1)
end
