--[[ Moves waiting or ready tasks to new due times, keeping their payloads. A task a worker holds
  under a live lease is running and is left alone (its lease runs its course), so that a task
  moved here is handed out once, at its new time. A task whose lease ran out is moved, and the
  late worker's acknowledgement then finds another claim token and changes nothing.

  Input:
    KEYS     the wheel's keys, then the ring slot keys the tasks may go to (as for schedule)
    ARGV[1]  tick in ms   ARGV[2] slots
    ARGV[3]  the declared slots' indices (packed, as for schedule)
    ARGV[4]  per task, milliseconds (packed)   ARGV[5] 'd', 'a', or one of those per task (as
             for schedule)
    ARGV[6 ..]  the tasks' keys
  Output:
    one digit per task: 1 moved, 0 none pending, 2 running (left alone).
  Keys: TASKS, the declared slots, RING, FAR, READY, LEASED, CLAIMED, CURSOR, WAKE. The task's old
  slot entry is left behind: the cursor drops it when it passes it, since it no longer matches
  the task's record (see tick.lua).
]]
-- @include keys
-- @include wheel_now
-- @include record
-- @include place
-- @include due_times
-- @include zrem_all
-- @include wake
-- @include claims
local tick_ms, slots = tonumber(ARGV[1]), tonumber(ARGV[2])
local declared, times, modes = ARGV[3], ARGV[4], ARGV[5]
-- The tasks' keys: task j's is ARGV[KEYS_FROM + j - 1].
local KEYS_FROM = 6

local w = wheel_now(tick_ms, slots, FIXED_KEYS + 1, declared)
local dues = due_times(times, modes, w.up)
local out, moved, due_of = {}, {}, {}
for i = KEYS_FROM, #ARGV do
  local j = i - KEYS_FROM + 1
  local k = ARGV[i]
  local rec = redis.call('HGET', TASKS, k)
  if not rec then
    out[j] = '0'
  else
    local t = decode(rec)
    if lease_end(t.tok) > w.down then
      out[j] = '2'
    else
      t.due, t.tok = dues[j], '0'
      -- Taken back from a lease that ran out, it is still the run in flight: an upsert queued
      -- behind it (queued.lua) still waits for its end.
      redis.call('HSET', TASKS, k, encode(t))
      if not due_of[k] then moved[#moved + 1] = k end
      due_of[k] = t.due
      out[j] = '1'
    end
  end
end
-- A key moved twice in one call is placed once, by its last move.
zrem_all(READY, moved)
zrem_all(FAR, moved)
forget_claims(moved)
local batch = new_batch()
for _, k in ipairs(moved) do place(k, due_of[k], w, batch) end
if flush(batch) then wake() end
return table.concat(out)
