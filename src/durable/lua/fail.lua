-- Reports a failed delivery: the task is retried after backoff * 2^(attempt-1) (capped) through
-- the wheel, or goes to the dead letters after its last attempt. Refused, like ack, when the
-- claim token is not the task's current one.
--
-- KEYS[1]  the wheel's meta key
-- ARGV[1]  key prefix   ARGV[2] key   ARGV[3] claim token   ARGV[4] error text
-- ARGV[5]  max attempts   ARGV[6] backoff base in ms   ARGV[7] backoff cap in ms
-- ARGV[8]  tick in ms   ARGV[9] slots   ARGV[10] ms to remember the request id
-- Returns  1 retried, 2 dead, 0 refused.

local k = ARGV[2]
local tk = P .. 't:' .. k
local h = redis.call('HMGET', tk, 'tok', 'a')
if h[1] ~= ARGV[3] then return 0 end
local a = tonumber(h[2])
local now = now_up()
if a >= tonumber(ARGV[5]) then
  bury(k, a, ARGV[4], now, tonumber(ARGV[10]))
  return 2
end
redis.call('ZREM', P .. 'leased', k)
local tick_ms, slots = tonumber(ARGV[8]), tonumber(ARGV[9])
local delay = math.min(tonumber(ARGV[7]), tonumber(ARGV[6]) * 2 ^ (a - 1))
local due = now + delay
local tick = due_tick(due, tick_ms)
redis.call('HSET', tk, 'due', due, 'tick', tick, 'err', ARGV[4])
redis.call('HDEL', tk, 'tok')
if place(k, tick, due, cursor_of(now, tick_ms), slots, math.floor(now_ms() / tick_ms)) then wake() end
redis.call('HINCRBY', P .. 'meta', 'retried', 1)
return 1
