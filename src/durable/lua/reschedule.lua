--[[ Moves a waiting or ready task to a new due time, keeping its payload. A task a worker holds
  under a live lease is running and is left alone (its lease runs its course), so that a task
  moved here is handed out once, at its new time. A task whose lease ran out is moved, and the
  late worker's acknowledgement then finds no claim token and changes nothing.

  Input:
    KEYS[1]  the wheel's meta key
    ARGV[1]  key prefix   ARGV[2] tick in ms   ARGV[3] slots   ARGV[4] key
    ARGV[5]  'd' (delay) or 'a' (at)   ARGV[6] milliseconds
  Output:
    1 moved, 0 none pending, 2 running (left alone).
  Keys: t:<key>, leased, cursor, wake, the task's old and new place (slot:<i>, ring, far, ready).
]]
-- @include keys
-- @include now_ms
-- @include now_up
-- @include due_tick
-- @include cursor_of
-- @include place
-- @include unplace
-- @include wake
local tick_ms, slots, k, mode, ms = tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4], ARGV[5], tonumber(ARGV[6])

local tk = task_key(k)
local old = redis.call('HMGET', tk, 'tick', 'tok')
if not old[1] then return 0 end
if old[2] and tonumber(redis.call('ZSCORE', LEASED, k) or 0) > now_ms() then return 2 end
unplace(k, tonumber(old[1]), slots)
local now = now_up()
local due = ms
if mode == 'd' then due = now + ms end
local tick = due_tick(due, tick_ms)
redis.call('HSET', tk, 'due', due, 'tick', tick)
redis.call('HDEL', tk, 'tok')
if place(k, tick, due, cursor_of(now, tick_ms), slots, math.floor(now_ms() / tick_ms)) then wake() end
return 1
