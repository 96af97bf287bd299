-- Cancels a batch of tasks by key, wherever they are (waiting, ready or in flight).
--
-- KEYS[1]  the wheel's meta key
-- ARGV[1]  key prefix   ARGV[2] slots   ARGV[3 ..] keys
-- Returns  one integer per key: 1 cancelled, 0 none pending.

local slots = tonumber(ARGV[2])
local out = {}
for i = 3, #ARGV do
  local k = ARGV[i]
  local tk = P .. 't:' .. k
  local tick = redis.call('HGET', tk, 'tick')
  if tick then
    unplace(k, tonumber(tick), slots)
    redis.call('DEL', tk)
    out[#out + 1] = 1
  else
    out[#out + 1] = 0
  end
end
return out
