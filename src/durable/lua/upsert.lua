--[[ Upserts a recurring task: makes the series under `key` this one, whole (its schedule, its
  recurrence, its payload and its retry settings), in one step.

  - No task under the key: the task is made, its first run due at ARGV[6]. Answers 1.
  - A task waiting or ready (or whose lease ran out: no worker runs it any more): its record is
    replaced by the new one and its old place (far tier, `ready`, lease) removed; an old ring
    entry stays for the tick to drop (its record no longer places it there). Answers 0.
  - A task running under a live lease: it is left to run, and the new record is queued behind it
    (UPSERTS, see includes/queued.lua, replacing one queued there before), to take the place of
    whatever the run's end would have placed next: its first run at its own due time, at once if
    that has passed by then. So a key never runs twice at once, and at most one run waits behind
    a running one. Answers 3.

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
    one digit: 1 made, 0 replaced a waiting or ready task, 3 queued behind a running run.
  Keys: CALL_KEY, TASKS, UPSERTS, the declared slots, RING, FAR, READY, LEASED, CLAIMED, CURSOR,
  META, WAKE.
]]
-- @include keys
-- @include wheel_now
-- @include record
-- @include request
-- @include place
-- @include wake
-- @include queued
-- @include claims
local tick_ms, slots, ttl, declared = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3], ARGV[4]
local k, due = ARGV[5], tonumber(ARGV[6])
local every, runs, missed, spec = tonumber(ARGV[7]), tonumber(ARGV[8]), ARGV[9], ARGV[10]
local payload, trace, retry = ARGV[11], ARGV[12], ARGV[13]

local kept = replayed()
if kept then return kept end
local w = wheel_now(tick_ms, slots, FIXED_KEYS + 2, declared)
local new = new_record(due, payload, every, runs, missed, spec, trace, retry)
local rec = redis.call('HGET', TASKS, k)
local out = '1'
if rec then
  out = '0'
  if token_of(rec) ~= '0' and tonumber(redis.call('ZSCORE', LEASED, k) or 0) > w.down then
    redis.call('HSET', UPSERTS, k, new)
    return remember('3', ttl)
  end
  redis.call('ZREM', FAR, k)
  redis.call('ZREM', READY, k)
  redis.call('ZREM', LEASED, k)
  forget_claims({k})
else
  redis.call('HINCRBY', META, 'scheduled', 1)
end
redis.call('HSET', TASKS, k, new)
drop_queued({k})
local batch = new_batch()
place(k, due, w, batch)
if flush(batch) then wake() end
return remember(out, ttl)
