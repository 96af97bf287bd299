--[[ Reads the wheel's gauges and counters at one moment.

  Input:
    KEYS[1]  the wheel's meta key
    ARGV[1]  key prefix   ARGV[2] tick in ms
  Output:
    {ring, far, ready, leased, dead, cursor lag in ticks, scheduled, handed_out, acked, retried,
    dead_lettered}
  Keys: cursor, meta, ring, far, ready, leased, dead.
]]
-- @include keys
-- @include now_ms
local tick_ms = tonumber(ARGV[2])

local now_tick = math.floor(now_ms() / tick_ms)
local cursor = tonumber(redis.call('GET', CURSOR) or now_tick)
local c = redis.call('HMGET', META, 'scheduled', 'handed_out', 'acked', 'retried', 'dead_lettered')
local lag = now_tick - cursor
if lag < 0 then lag = 0 end
return {
  tonumber(redis.call('GET', RING) or '0'),
  redis.call('ZCARD', FAR),
  redis.call('ZCARD', READY),
  redis.call('ZCARD', LEASED),
  redis.call('ZCARD', DEAD),
  lag,
  tonumber(c[1] or '0'), tonumber(c[2] or '0'), tonumber(c[3] or '0'), tonumber(c[4] or '0'),
  tonumber(c[5] or '0'),
}
