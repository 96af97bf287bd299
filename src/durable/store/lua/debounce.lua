--[[ Debounces the task under a key (`DurableScheduler::debounce`): one run a burst of calls,
  `quiet` after the burst's last call and never later than `max_wait` after its first, with the
  last call's payload, all on the store's clock.

  - No task under the key: a new one, due at now + quiet (at most the burst's cap, now +
    max_wait, kept in the record's burst field, record.lua). Answers 1: a new burst.
  - A waiting task whose burst is open (it has a burst field, and the burst's run has not
    started: a failure or a snooze closes it, fail.lua): it moves to min(now + quiet, cap) and
    takes the new payload. Answers 0.
  - A waiting task without an open burst (scheduled otherwise, or waiting for a retry): the call
    opens a burst on it (cap now + max_wait), as above. Answers 1.
  - A task in flight (a worker holds it, or its lease ran out and it waits to be handed out
    again): the next burst waits behind the run, queued (queued.lua) as an upsert is, and takes
    the key's place when the run ends (acknowledged, or dead); calls while it waits move that
    queued burst as above, also while the run waits for a retry. Answers 1 for the call that
    queues it, else 0.

  Input:
    KEYS     the wheel's keys, then the ring slot keys the task may go to
    ARGV[1]  tick in ms   ARGV[2] slots   ARGV[3] the declared slots' indices (packed)
    ARGV[4]  quiet in ms   ARGV[5] max_wait in ms   ARGV[6] key   ARGV[7] payload
    ARGV[8]  the task's own retry settings (record.lua; '' for the node's)
    ARGV[9]  the trace context of the span that scheduled it ('' for none)
  Output:
    1 a new burst, 0 a call that joined an open burst.
  Keys: TASKS, UPSERTS, the declared slots, RING, FAR, READY, CURSOR, META, WAKE.
]]
-- @include keys
-- @include wheel_now
-- @include record
-- @include place
-- @include zrem_all
-- @include wake
-- @include queued
local tick_ms, slots, declared = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3]
local quiet, max_wait, k, payload = tonumber(ARGV[4]), tonumber(ARGV[5]), ARGV[6], ARGV[7]
local retry, trace = ARGV[8], ARGV[9]
local w = wheel_now(tick_ms, slots, FIXED_KEYS + 1, declared)
local now = w.up

-- The burst of table `t` (decode's) moved by this call: its cap kept, or a new one from now (a
-- record delivered before has none open: its run started). Returns whether the burst is new.
local function join(t)
  local cap = t.burst ~= '' and t.a == 0 and tonumber(t.burst)
  local fresh = not cap
  if fresh then cap = now + max_wait end
  t.burst = string.format('%d', cap)
  t.due = math.min(now + quiet, cap)
  t.p = payload
  return fresh
end

local rec = redis.call('HGET', TASKS, k)
if not rec then
  local t = decode(new_record(now, payload, 0, 0, '0', '', trace, retry))
  t.burst = ''
  join(t)
  redis.call('HSET', TASKS, k, encode(t))
  drop_queued({k})
  local batch = new_batch()
  place(k, t.due, w, batch)
  if flush(batch) then wake() end
  redis.call('HINCRBY', META, 'scheduled', 1)
  return 1
end

local t = decode(rec)
local q = queued_of({k})[1]
if t.tok ~= '0' or q then
  -- In flight (or waiting for a retry of a run with a burst queued behind it): the next burst
  -- waits behind the run, so that the key's last run carries the last call's payload.
  local nt = q and decode(q) or decode(new_record(now, payload, 0, 0, '0', '', trace, retry))
  local fresh = join(nt)
  redis.call('HSET', UPSERTS, k, encode(nt))
  return (fresh or not q) and 1 or 0
end

local fresh = join(t)
redis.call('HSET', TASKS, k, encode(t))
-- Its old place: a far or ready entry goes now, a slot entry when the cursor passes it (the tick
-- drops an entry its record no longer places there).
zrem_all(FAR, {k})
zrem_all(READY, {k})
local batch = new_batch()
place(k, t.due, w, batch)
if flush(batch) then wake() end
return fresh and 1 or 0
