--[[ Opens a wheel: records its tick and slot count on first use, refuses a mismatch afterwards,
  and starts the cursor at the current tick if there is none.

  Input:
    KEYS[1]  the wheel's meta key
    ARGV[1]  key prefix   ARGV[2] tick in ms   ARGV[3] slots
  Output:
    {'1'} when opened, or {'0', recorded tick_ms, recorded slots} on a mismatch.
  Keys: meta, cursor.
]]
-- @include keys
-- @include now_ms
-- @include cursor_of
local tick_ms, slots = ARGV[2], ARGV[3]

local m = redis.call('HMGET', META, 'tick_ms', 'slots')
if m[1] then
  if m[1] ~= tick_ms or m[2] ~= slots then return {'0', m[1], m[2] or ''} end
else
  redis.call('HSET', META, 'tick_ms', tick_ms, 'slots', slots)
end
cursor_of(now_ms(), tonumber(tick_ms))
return {'1'}
