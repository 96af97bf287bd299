--[[ Schedules a batch of tasks, each under a key that must not be pending: one HMGET (is each
  key pending?) and one HSET (the new records) for the whole call, and one RPUSH per ring slot
  (per task when ARGV[11] says the tasks have slots of their own), a ZADD for the far tier and
  one for `ready`. With ARGV[4] '1', task by task: an HSETNX, and for a
  pending key its move.

  Safe to retry: the call's answer is kept under its request id (CALL_KEY) for `ttl` ms, so a
  retry whose first attempt landed answers 2 for what it scheduled, even if those tasks have
  since been acknowledged, cancelled or buried, and schedules nothing again.

  What Redis does per task is what the task needs (its record, its ring entry) and little else:
  the numbers come packed (one `cmsgpack.unpack` each for the slots and the times, not a
  `tonumber` per argument), the due time is formatted once for both the record and the score,
  and the answer is one string.

  Input:
    KEYS     the wheel's keys, then CALL_KEY (the call's request record), then the ring slot
             keys the tasks may go to (the caller's guess from its estimate of Redis's clock; a
             task whose slot is not among them waits in the far tier instead)
    ARGV[1]  tick in ms   ARGV[2] slots   ARGV[3] ms to keep the answer
    ARGV[4]  '1' to move a pending task to the new due time instead (schedule_or_reset), else '0'
    ARGV[5]  the period of a recurring task in ms (0: each task runs once)   ARGV[6] its runs
             (-1: forever)   ARGV[7] its missed-run policy (0 burst, 1 delay, 2 skip)
    ARGV[8]  the declared slots' indices, in the order of their keys (packed, see keys.rs)
    ARGV[9]  per task, milliseconds: a delay from Redis's now, or a time on Redis's clock (packed)
    ARGV[10] 'd' if every time is a delay, 'a' if every one is a time, else one of those per task
    ARGV[11] '1' if the caller named no slot for two tasks (see place.lua's `new_batch`), else '0';
             not read with ARGV[4] '1'
    ARGV[12] a recurring task's spec, for a series whose next runs the node works out (see
             record.lua), else ''
    ARGV[13] per task, the trace context of the span that scheduled it (see record.lua), one
             line each (an empty line for none); '' when no task has one
    ARGV[14] per task, its own retry settings (see record.lua), one line each (an empty line for
             the node's); '' when no task has its own
    ARGV[15 + 2i], ARGV[16 + 2i]  per task: key, payload
  Output:
    one digit per task: 1 scheduled; 2 scheduled by an earlier attempt of this call; 0 the key
    is pending (DuplicateKey); with ARGV[4] '1', 4 a pending task was moved (keeping its
    payload and its retry settings) and 3 a running one was left alone.
  Keys: CALL_KEY, TASKS, the declared slots, RING, FAR, READY, LEASED, CLAIMED, CURSOR, META, WAKE,
  UPSERTS (an upsert left queued under a key that had no task is dropped when one is made).
]]
-- @include keys
-- @include wheel_now
-- @include record
-- @include request
-- @include due_times
-- @include place
-- @include zrem_all
-- @include hash_all
-- @include wake
-- @include queued
-- @include claims
local tick_ms, slots, ttl, reset = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3], ARGV[4] == '1'
local every, runs, missed = tonumber(ARGV[5]), tonumber(ARGV[6]), ARGV[7]
local declared, times, modes, own_slots = ARGV[8], ARGV[9], ARGV[10], ARGV[11] == '1'
local spec = ARGV[12]
-- One line per task of `arg` ('' for none): task j's is lines[j] (nil when `arg` is '').
local function lines_of(arg)
  local lines = {}
  if arg ~= '' then
    for line in string.gmatch(arg .. '\n', '([^\n]*)\n') do lines[#lines + 1] = line end
  end
  return lines
end
-- Task j's trace is traces[j], its retry settings retries[j] (nil or '' for none).
local traces, retries = lines_of(ARGV[13]), lines_of(ARGV[14])
-- The tasks: task j's key is ARGV[TASKS_FROM + 2j - 2], its payload the argument after it.
local TASKS_FROM = 15

local kept = replayed()
if kept then return (string.gsub(kept, '1', '2')) end
local w = wheel_now(tick_ms, slots, FIXED_KEYS + 2, declared)
local dues = due_times(times, modes, w.up)
local out, created, batch, woke = {}, 0, new_batch(not reset and own_slots), false
local names, payload_of = {}, function(j) return ARGV[TASKS_FROM + 2 * j - 1] end
for i = TASKS_FROM, #ARGV, 2 do names[#names + 1] = ARGV[i] end
if not reset then
  -- One HMGET reads whether each key is pending, one HSET writes the new records, and `place`
  -- or `flush` the ring entries: per task only its record and its ring entry. A key twice in one
  -- call is scheduled once, by its first item.
  local pending = hmget_all(TASKS, names)
  local fresh, taken = {}, {}
  local tail = new_tail(every, runs, missed, spec)
  for j, k in ipairs(names) do
    if pending[j] or taken[k] then
      out[j] = '0'
    else
      taken[k] = true
      local due = dues[j]
      local text = string.format('%d', due)
      fresh[#fresh + 1] = k
      local own = traces[j] or retries[j]
      fresh[#fresh + 1] = text .. (own and new_tail(every, runs, missed, spec, traces[j], retries[j]) or tail)
        .. payload_of(j)
      place(k, due, w, batch, text)
      created = created + 1
      out[j] = '1'
    end
  end
  hset_all(TASKS, fresh)
  local made = {}
  for i = 1, #fresh, 2 do made[#made + 1] = fresh[i] end
  drop_queued(made)
else
  for j, k in ipairs(names) do
    local due = dues[j]
    local new = new_record(due, payload_of(j), every, runs, missed, spec, traces[j], retries[j])
    if redis.call('HSETNX', TASKS, k, new) == 1 then
      place(k, due, w, batch)
      drop_queued({k})
      created = created + 1
      out[j] = '1'
    else
      local t = decode(redis.call('HGET', TASKS, k))
      if lease_end(t.tok) > w.down then
        out[j] = '3'
      else
        -- Its old place: a far or ready entry goes now, a slot entry when the cursor passes it.
        -- What this call placed already is written first, so that nothing of it is left behind.
        woke = flush(batch) or woke
        batch = new_batch()
        -- A run whose lease ran out (or that waits for its retry) is still the run in flight: an
        -- upsert queued behind it (queued.lua) still waits for its end, as for reschedule.lua.
        local tok = t.tok
        t.due, t.tok = due, '0'
        redis.call('HSET', TASKS, k, encode(t))
        zrem_all(FAR, {k})
        zrem_all(READY, {k})
        if tok ~= '0' then forget_claims({k}, {tok}) end
        place(k, due, w, batch)
        out[j] = '4'
      end
    end
  end
end
if flush(batch) or woke then wake() end
if created > 0 then redis.call('HINCRBY', META, 'scheduled', created) end
return remember(table.concat(out), ttl)
