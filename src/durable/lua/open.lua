-- Opens a wheel: records its tick and slot count on first use, refuses a mismatch afterwards,
-- and starts the cursor at the current tick if there is none.
--
-- KEYS[1]  the wheel's meta key
-- ARGV[1]  key prefix   ARGV[2] tick in ms   ARGV[3] slots
-- Returns  {'1'} when opened, or {'0', recorded tick_ms, recorded slots} on a mismatch.

local m = redis.call('HMGET', P .. 'meta', 'tick_ms', 'slots')
if m[1] then
  if m[1] ~= ARGV[2] or m[2] ~= ARGV[3] then return {'0', m[1], m[2] or ''} end
else
  redis.call('HSET', P .. 'meta', 'tick_ms', ARGV[2], 'slots', ARGV[3])
end
cursor_of(now_ms(), tonumber(ARGV[2]))
return {'1'}
