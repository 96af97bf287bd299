--[[ Opens a wheel (or one partition of it): records its tick, slots, partition count and layout on
  first use, refuses a mismatch afterwards, and starts the cursor at the current tick if there
  is none (for a partition; the record of a partitioned wheel has no cursor).

  A wheel recorded in another layout (the record's `layout`: the keys and the formats of
  docs/DESIGN.md's table, 1 in the first release) is refused whatever it holds: this version
  reads only its own.

  Input:
    KEYS     the wheel's keys
    ARGV[1]  tick in ms   ARGV[2] slots   ARGV[3] partitions   ARGV[4] '1' to start the cursor
  Output:
    {'1', Redis's clock in ms} when opened; {'0', recorded tick_ms, recorded slots, recorded
    partitions} on a mismatch; {'layout', the recorded layout ('' for none)} for another layout.
  Keys: META, CURSOR.
]]
-- @include keys
-- @include clock
local LAYOUT = '1'
local tick_ms, slots, partitions, start_cursor = ARGV[1], ARGV[2], ARGV[3], ARGV[4] == '1'

local m = redis.call('HMGET', META, 'tick_ms', 'slots', 'partitions', 'layout')
if m[1] and m[4] ~= LAYOUT then return {'layout', m[4] or ''} end
if m[1] then
  local recorded = m[3] or '1'
  if m[1] ~= tick_ms or m[2] ~= slots or recorded ~= partitions then
    return {'0', m[1], m[2] or '', recorded}
  end
else
  redis.call('HSET', META, 'tick_ms', tick_ms, 'slots', slots, 'partitions', partitions, 'layout', LAYOUT)
end
local now = clock()
if start_cursor and redis.call('EXISTS', CURSOR) == 0 then
  redis.call('SET', CURSOR, math.floor(now / tonumber(tick_ms)))
end
return {'1', tostring(now)}
