-- Reads the wheel's gauges and counters at one moment.
--
-- KEYS[1]  the wheel's meta key
-- ARGV[1]  key prefix   ARGV[2] tick in ms
-- Returns  {ring, far, ready, leased, dead, cursor lag in ticks, scheduled, handed_out, acked,
--          retried, dead_lettered}

local now_tick = math.floor(now_ms() / tonumber(ARGV[2]))
local cursor = tonumber(redis.call('GET', P .. 'cursor') or now_tick)
local c = redis.call('HMGET', P .. 'meta', 'scheduled', 'handed_out', 'acked', 'retried', 'dead_lettered')
local lag = now_tick - cursor
if lag < 0 then lag = 0 end
return {
  tonumber(redis.call('GET', P .. 'ring') or '0'),
  redis.call('ZCARD', P .. 'far'),
  redis.call('ZCARD', P .. 'ready'),
  redis.call('ZCARD', P .. 'leased'),
  redis.call('ZCARD', P .. 'dead'),
  lag,
  tonumber(c[1] or '0'), tonumber(c[2] or '0'), tonumber(c[3] or '0'), tonumber(c[4] or '0'),
  tonumber(c[5] or '0'),
}
