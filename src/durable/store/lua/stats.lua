--[[ Reads the wheel's gauges and counters at one moment.

  Input:
    KEYS     the wheel's keys
    ARGV[1]  tick in ms
  Output:
    {waiting, ready, leased, dead, cursor lag in ticks, scheduled, handed_out, acked, retried,
    dead_lettered, cancelled, 1 if paused else 0}
  Keys: CURSOR, META, TASKS, READY, CLAIMED, DEAD. Waiting is every pending task neither ready nor
  claimed (the ring's count also holds the entries of cancelled tasks not yet passed).
]]
-- @include keys
-- @include clock
local tick_ms = tonumber(ARGV[1])

local now_tick = math.floor(clock() / tick_ms)
local cursor = tonumber(redis.call('GET', CURSOR) or now_tick)
local c = redis.call('HMGET', META, 'scheduled', 'handed_out', 'acked', 'retried', 'dead_lettered', 'cancelled')
local lag = now_tick - cursor
if lag < 0 then lag = 0 end
local ready, leased = redis.call('ZCARD', READY), redis.call('ZCARD', CLAIMED)
local out = {
  math.max(0, redis.call('HLEN', TASKS) - ready - leased),
  ready,
  leased,
  redis.call('ZCARD', DEAD),
  lag,
}
for i = 1, 6 do out[#out + 1] = tonumber(c[i] or '0') end
out[#out + 1] = redis.call('HEXISTS', META, 'paused')
return out
