--[[ Lists up to `limit` dead letters, oldest first, from rank `offset` on (the caller pages
  through a long list with a bounded `limit` per call).

  Input:
    KEYS     the wheel's keys
    ARGV[1]  limit   ARGV[2] offset
  Output:
    a flat array, six entries per dead task: key, payload, deliveries, last error, ms it died
    at, ms it was due.
  Keys: DEAD, DEAD_TASKS.
]]
-- @include keys
-- @include record
local limit, offset = tonumber(ARGV[1]), tonumber(ARGV[2])

local ks = redis.call('ZRANGE', DEAD, offset, offset + limit - 1, 'WITHSCORES')
local out = {}
for i = 1, #ks, 2 do
  local d = decode_dead(redis.call('HGET', DEAD_TASKS, ks[i]) or '0:0:0:')
  out[#out + 1] = ks[i]
  out[#out + 1] = d.p
  out[#out + 1] = d.a
  out[#out + 1] = d.err
  out[#out + 1] = ks[i + 1]
  out[#out + 1] = d.due
end
return out
