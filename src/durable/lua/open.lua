--[[ Opens a wheel (or one partition of it): records its tick, slot count and partition count on
  first use, refuses a mismatch afterwards, and starts the cursor at the current tick if there
  is none (for a partition; the record of a partitioned wheel has no cursor). A wheel recorded
  before partitions existed has one.

  Input:
    KEYS[1]  the wheel's meta key
    ARGV[1]  key prefix   ARGV[2] tick in ms   ARGV[3] slots   ARGV[4] partitions
    ARGV[5]  '1' to start the cursor, else '0'
  Output:
    {'1'} when opened, or {'0', recorded tick_ms, recorded slots, recorded partitions} on a
    mismatch.
  Keys: meta, cursor.
]]
-- @include keys
-- @include now_ms
-- @include cursor_of
local tick_ms, slots, partitions, start_cursor = ARGV[2], ARGV[3], ARGV[4], ARGV[5] == '1'

local m = redis.call('HMGET', META, 'tick_ms', 'slots', 'partitions')
if m[1] then
  local recorded = m[3] or '1'
  if m[1] ~= tick_ms or m[2] ~= slots or recorded ~= partitions then
    return {'0', m[1], m[2] or '', recorded}
  end
else
  redis.call('HSET', META, 'tick_ms', tick_ms, 'slots', slots, 'partitions', partitions)
end
if start_cursor then cursor_of(now_ms(), tonumber(tick_ms)) end
return {'1'}
