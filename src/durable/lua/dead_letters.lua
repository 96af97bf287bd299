--[[ Lists up to `limit` dead letters, oldest first, from rank `offset` on (the caller pages
  through a long list with a bounded `limit` per call).

  Input:
    KEYS[1]  the wheel's meta key
    ARGV[1]  key prefix   ARGV[2] limit   ARGV[3] offset
  Output:
    a flat array, five entries per dead task: key, payload, deliveries, last error, ms it died at.
  Keys: dead, d:<key>.
]]
-- @include keys
local limit, offset = tonumber(ARGV[2]), tonumber(ARGV[3])

local ks = redis.call('ZRANGE', DEAD, offset, offset + limit - 1, 'WITHSCORES')
local out = {}
for i = 1, #ks, 2 do
  local h = redis.call('HMGET', dead_task_key(ks[i]), 'p', 'a', 'err')
  out[#out + 1] = ks[i]
  out[#out + 1] = h[1] or ''
  out[#out + 1] = h[2] or '0'
  out[#out + 1] = h[3] or ''
  out[#out + 1] = ks[i + 1]
end
return out
