--[[ Upserts a recurring task: makes the series under `key` this one, whole (its schedule, its
  recurrence, its payload and its retry settings), in one step, and never loses a run.

  - No task under the key: the task is made, its first run due at ARGV[6]. Answers 1.
  - The same series is pending (see `same_series`: cadence, bounds, missed-run policy, retry
    settings and payload equal): nothing changes, so the series keeps its next run and its
    phase; an upsert at every start of a node does not push an `every` series back. Answers 2.
  - A run in flight: a worker holds it (under a live lease, or one that ran out and that the
    tick has not yet given back), or it waits to be delivered again (it was delivered before:
    its lease ran out or its handler failed, and a retry is due). The run is left to finish as
    at-least-once promises (delivered again until it is acknowledged or dead), and the new
    record is queued behind it (UPSERTS, see includes/queued.lua, replacing one queued there
    before), to take the place of whatever the run's end would have placed next: its first run
    at its own due time, at once if that has passed by then. So a key never runs twice at once,
    no run is dropped by a deploy, and at most one series waits behind a run. Answers 3. An
    upsert of the series that runs, after another was queued, drops the queued one (the series
    goes on as before: answers 2).
  - A task waiting or ready, never delivered: its record is replaced by the new one and its old
    place (far tier, `ready`) removed; an old ring entry stays for the tick to drop (its record
    no longer places it there). Answers 0.

  The last call to run wins whatever the interleaving: every call replaces everything the one
  before it wrote.

  Safe to retry: the answer is kept under the call's request id (CALL_KEY) for `ttl` ms, and a
  retry whose first attempt landed answers the same and changes nothing.

  Input:
    KEYS     the wheel's keys, then CALL_KEY (the call's request record), then the ring slot
             keys the first run may go to (the caller's guess, as for schedule.lua)
    ARGV[1]  tick in ms   ARGV[2] slots   ARGV[3] ms to keep the answer
    ARGV[4]  the declared slots' indices (packed, as for schedule.lua)
    ARGV[5]  key   ARGV[6] the first run's due time, ms on Redis's clock
    ARGV[7]  period in ms (0 for a series with a spec)   ARGV[8] runs (-1: forever)
    ARGV[9]  missed-run policy (0 burst, 1 delay, 2 skip)   ARGV[10] spec ('' for none; see
             record.lua)
    ARGV[11] payload   ARGV[12] the trace context of the span that upserted it ('' for none;
             see record.lua)   ARGV[13] its own retry settings ('' for the node's; see
             record.lua)
  Output:
    one digit: 1 made, 0 replaced a waiting or ready task, 2 kept (the same series was
    pending), 3 queued behind a run in flight.
  Keys: CALL_KEY, TASKS, UPSERTS, the declared slots, RING, FAR, READY, CURSOR, META, WAKE.
]]
-- @include keys
-- @include wheel_now
-- @include record
-- @include request
-- @include place
-- @include wake
-- @include queued
local tick_ms, slots, ttl, declared = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3], ARGV[4]
local k, due = ARGV[5], tonumber(ARGV[6])
local every, runs, missed, spec = tonumber(ARGV[7]), tonumber(ARGV[8]), ARGV[9], ARGV[10]
local payload, trace, retry = ARGV[11], ARGV[12], ARGV[13]

local kept = replayed()
if kept then return kept end
local w = wheel_now(tick_ms, slots, FIXED_KEYS + 2, declared)
local new = new_record(due, payload, every, runs, missed, spec, trace, retry)
-- Whether the stored series `t` (decoded) is the one this call upserts: the same cadence
-- (period, spec), missed-run policy, retry settings and payload, and runs left that this
-- call's count could have come to (-1: forever; a counted series that ran some of its runs is
-- still the same series). The first due time and the trace are not compared: a series keeps its
-- phase, and the span that upserted it.
local function same_series(t)
  local same_runs = t.runs == runs or (runs > 0 and t.runs > 0 and t.runs <= runs)
  return same_runs and t.every == every and t.missed == missed and t.spec == spec and t.retry == retry
    and t.p == payload
end

local rec = redis.call('HGET', TASKS, k)
local out = '1'
if rec then
  local t = decode(rec)
  if t.tok ~= '0' or t.a > 0 then
    -- A run in flight: it finishes (or is delivered again) first.
    local queued = queued_of({k})[1]
    if queued and same_series(decode(queued)) then return remember('2', ttl) end
    if same_series(t) then
      drop_queued({k})
      return remember('2', ttl)
    end
    redis.call('HSET', UPSERTS, k, new)
    return remember('3', ttl)
  end
  if same_series(t) then return remember('2', ttl) end
  out = '0'
  redis.call('ZREM', FAR, k)
  redis.call('ZREM', READY, k)
else
  redis.call('HINCRBY', META, 'scheduled', 1)
end
redis.call('HSET', TASKS, k, new)
drop_queued({k})
local batch = new_batch()
place(k, due, w, batch)
if flush(batch) then wake() end
return remember(out, ttl)
