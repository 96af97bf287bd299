--[[ Moves a batch of waiting or ready tasks to new due times, keeping their payloads. A task a
  worker holds under a live lease is running and is left alone (its lease runs its course), so
  that a task moved here is handed out once, at its new time. A task whose lease ran out is
  moved, and the late worker's acknowledgement then finds no claim token and changes nothing.

  The tasks are moved in order, as so many calls one after the other: a key given twice is moved
  twice (both answer 1, the later time stands). Redis's clock is read once for the whole call, so
  every 'd' delay counts from the same instant. Safe to retry: a retry moves the same tasks to the
  same times (a 'd' delay counted again from the retry's clock).

  Input:
    KEYS[1]  the wheel's meta key
    ARGV[1]  key prefix   ARGV[2] tick in ms   ARGV[3] slots
    ARGV[4 + 3i], ARGV[5 + 3i], ARGV[6 + 3i]  per task (i = 0, 1, ...): key, 'd' (delay) or
             'a' (at), milliseconds
  Output:
    one integer per task, in order: 1 moved, 0 none pending, 2 running (left alone).
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
local tick_ms, slots = tonumber(ARGV[2]), tonumber(ARGV[3])

-- The lease check rounds the clock down (a lease is live until its last ms has passed), due
-- times count from it rounded up (never early).
local now_down, now = now_ms(), now_up()
local now_tick = math.floor(now_down / tick_ms)
local cursor
local out, ready = {}, false
for i = 4, #ARGV, 3 do
  local k, mode, ms = ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2])
  local tk = task_key(k)
  local old = redis.call('HMGET', tk, 'tick', 'tok')
  if not old[1] then
    out[#out + 1] = 0
  elseif old[2] and tonumber(redis.call('ZSCORE', LEASED, k) or 0) > now_down then
    out[#out + 1] = 2
  else
    unplace(k, tonumber(old[1]), slots)
    local due = ms
    if mode == 'd' then due = now + ms end
    local tick = due_tick(due, tick_ms)
    redis.call('HSET', tk, 'due', due, 'tick', tick)
    redis.call('HDEL', tk, 'tok')
    -- Read only when a task moves: a call that moves nothing writes nothing.
    cursor = cursor or cursor_of(now, tick_ms)
    if place(k, tick, due, cursor, slots, now_tick) then ready = true end
    out[#out + 1] = 1
  end
end
if ready then wake() end
return out
