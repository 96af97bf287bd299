-- Moves a waiting or ready task to a new due time, keeping its payload. A task a worker holds
-- under a live lease is running and is left alone (its lease runs its course), so that a task
-- moved here is handed out once, at its new time. A task whose lease ran out is moved, and the
-- late worker's acknowledgement then finds no claim token and changes nothing.
--
-- KEYS[1]  the wheel's meta key
-- ARGV[1]  key prefix   ARGV[2] tick in ms   ARGV[3] slots   ARGV[4] key
-- ARGV[5]  'd' (delay) or 'a' (at)   ARGV[6] milliseconds
-- Returns  1 moved, 0 none pending, 2 running (left alone).

local tick_ms, slots, k = tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
local tk = P .. 't:' .. k
local old = redis.call('HMGET', tk, 'tick', 'tok')
if not old[1] then return 0 end
if old[2] and tonumber(redis.call('ZSCORE', P .. 'leased', k) or 0) > now_ms() then return 2 end
unplace(k, tonumber(old[1]), slots)
local now = now_up()
local due = tonumber(ARGV[6])
if ARGV[5] == 'd' then due = now + due end
local tick = due_tick(due, tick_ms)
redis.call('HSET', tk, 'due', due, 'tick', tick)
redis.call('HDEL', tk, 'tok')
if place(k, tick, due, cursor_of(now, tick_ms), slots, math.floor(now_ms() / tick_ms)) then wake() end
return 1
