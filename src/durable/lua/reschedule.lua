-- Moves a pending task to a new due time, keeping its payload; a task in flight is taken back
-- from its worker (whose acknowledgement then finds another claim token and changes nothing).
--
-- KEYS[1]  the wheel's meta key
-- ARGV[1]  key prefix   ARGV[2] tick in ms   ARGV[3] slots   ARGV[4] key
-- ARGV[5]  'd' (delay) or 'a' (at)   ARGV[6] milliseconds
-- Returns  1 moved, 0 none pending.

local tick_ms, slots, k = tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
local tk = P .. 't:' .. k
local old = redis.call('HGET', tk, 'tick')
if not old then return 0 end
unplace(k, tonumber(old), slots)
local now = now_up()
local due = tonumber(ARGV[6])
if ARGV[5] == 'd' then due = now + due end
local tick = due_tick(due, tick_ms)
redis.call('HSET', tk, 'due', due, 'tick', tick)
redis.call('HDEL', tk, 'tok')
if place(k, tick, due, cursor_of(now, tick_ms), slots, math.floor(now_ms() / tick_ms)) then wake() end
return 1
