--[[ Reports a failed delivery: the task is retried after backoff * 2^(attempt-1) (capped)
  through the wheel, or goes to the dead letters after its last attempt (a recurring task's run
  goes there as a copy, and its series goes on with its next run: ARGV[10], as for ack.lua). An
  upsert queued behind the run (see includes/queued.lua) waits for the retry; once the run is
  dead, it takes the place of the series' next run. Refused, like ack, when the claim token is not the task's current one.

  Input:
    KEYS     the wheel's keys, then the ring slot keys the retry may go to
    ARGV[1]  key   ARGV[2] claim token   ARGV[3] error text
    ARGV[4]  max attempts   ARGV[5] backoff base in ms (the node's: a task with its own retry
             settings, see record.lua, uses those instead)   ARGV[6] backoff cap in ms
    ARGV[7]  tick in ms   ARGV[8] slots   ARGV[9] the declared slots' indices (packed, as for
             schedule)
    ARGV[10] the series' next due time after this run, for a series with a spec (as for ack.lua;
             '' for any other task)
    ARGV[11] the history's limit   ARGV[12] its age limit in ms   ARGV[13] the delivery's run
             for the history (as for ack.lua: a run that dies or is cancelled goes in the
             history, includes/history.lua)
    ARGV[14] '' for a failure; for a snooze (`Task::snooze`), its delay in ms: the task is due
             again that long after the store's now, as a waiting task, with the delivery it
             took not counted (its attempt does not grow, it never dies of it), the run in the
             history as snoozed ('s'), an upsert queued behind it still queued; the error
             text is not read
  Output:
    1 retried, 2 dead, 0 refused, 3 cancelled (its cancel was requested: it ends as cancelled,
    see cancelled.lua), 4 snoozed.
  Keys: TASKS, LEASED, UPSERTS, CANCELLING, CLAIMED, the declared slots, RING, FAR, READY, CURSOR,
  META, FIGURES, WAKE, and when it
  dies or is cancelled HISTORY, and when it dies DEAD_TASKS, DEAD.
]]
-- @include keys
-- @include wheel_now
-- @include record
-- @include place
-- @include advance
-- @include wake
-- @include bury
-- @include figures
-- @include queued
-- @include cancelled
-- @include claims
-- @include history
-- @include limits
local k, tok, err = ARGV[1], ARGV[2], ARGV[3]
local max_attempts, backoff_ms, backoff_cap_ms = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local tick_ms, slots, declared = tonumber(ARGV[7]), tonumber(ARGV[8]), ARGV[9]
local next_due = ARGV[10]
local history, run = history_of(ARGV[11], ARGV[12]), ARGV[13]
local snooze_ms = tonumber(ARGV[14] or '')

local rec = redis.call('HGET', TASKS, k)
if not rec or token_of(rec) ~= tok then return 0 end
if end_cancelled({k, tok, next_due, run}, 1, history) > 0 then
  flush_history(history)
  return 3
end
local t = decode(rec)
max_attempts, backoff_ms = retry_limits(t.retry, max_attempts, backoff_ms)
local w = wheel_now(tick_ms, slots, FIXED_KEYS + 1, declared)
local up = w.up
forget_claims({k}, {tok})
release_limits({k})
if snooze_ms then
  add_history(history, k, rec, 's', run)
  flush_history(history)
  t.due, t.tok, t.a, t.burst = up + snooze_ms, '0', math.max(t.a - 1, 0), ''
  redis.call('HSET', TASKS, k, encode(t))
  local batch = new_batch()
  place(k, t.due, w, batch)
  if flush(batch) then wake() end
  redis.call('HINCRBY', META, 'snoozed', 1)
  return 4
end
if t.a >= max_attempts then
  bury(k, t, err, up)
  add_history(history, k, rec, 'd', run, err)
  flush_history(history)
  redis.call('HINCRBY', META, 'dead_lettered', 1)
  count_figures({ f = 1, d = 1 }, up)
  -- The upsert queued behind this run (queued.lua) replaces what comes next.
  local queued = queued_of({k})[1]
  if queued then
    redis.call('HSET', TASKS, k, queued)
    drop_queued({k})
    local batch = new_batch()
    place(k, tonumber(record_due(queued)), w, batch)
    if flush(batch) then wake() end
  elseif advance(t, w.down, next_due) then
    redis.call('HSET', TASKS, k, encode(t))
    local batch = new_batch()
    place(k, t.due, w, batch)
    if flush(batch) then wake() end
  else
    redis.call('HDEL', TASKS, k)
  end
  return 2
end
-- Retried, as at-least-once promises; an upsert queued behind the run stays queued.
t.due = up + math.min(backoff_cap_ms, backoff_ms * 2 ^ (t.a - 1))
t.tok, t.err, t.burst = '0', err, ''
redis.call('HSET', TASKS, k, encode(t))
local batch = new_batch()
place(k, t.due, w, batch)
if flush(batch) then wake() end
redis.call('HINCRBY', META, 'retried', 1)
count_figures({ f = 1 }, up)
return 1
