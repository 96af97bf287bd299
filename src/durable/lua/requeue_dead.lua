-- Puts a dead task back, due at once with its deliveries reset to 0 and a new request id.
--
-- KEYS[1]  the wheel's meta key
-- ARGV[1]  key prefix   ARGV[2] key   ARGV[3] request id   ARGV[4] tick in ms
-- Returns  1 requeued, 0 no such dead letter, -1 a task with this key is pending.

local k = ARGV[2]
local dk = P .. 'd:' .. k
local p = redis.call('HGET', dk, 'p')
if not p then return 0 end
local tk = P .. 't:' .. k
if redis.call('EXISTS', tk) == 1 then return -1 end
local now = now_ms()
redis.call('HSET', tk, 'p', p, 'due', now, 'tick', due_tick(now, tonumber(ARGV[4])), 'a', 0, 'rid', ARGV[3])
redis.call('ZADD', P .. 'ready', now, k)
redis.call('DEL', dk)
redis.call('ZREM', P .. 'dead', k)
wake()
return 1
