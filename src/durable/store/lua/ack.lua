--[[ Acknowledges deliveries: each task is done and its key free again, or, for a recurring task
  with runs to come, moved on to its next run (see includes/acknowledge.lua). A delivery whose
  claim token is not the task's current one (its lease ran out and another worker has it, or it
  was cancelled or moved after its lease ran out) is refused, so a late worker never
  acknowledges someone else's delivery. A repeated ack is refused and changes nothing. A worker
  sends its acknowledgements with its next claim (claim.lua) when one is on its way, and here
  when none is.

  Each run that ends (acknowledged, or cancelled) goes in the history (includes/history.lua).

  Input:
    KEYS     the wheel's keys
    ARGV[1]  tick in ms   ARGV[2] slots
    ARGV[3]  the history's limit (entries; 0: keep no history)   ARGV[4] its age limit in ms
             (0: none)
    ARGV[5 + 4i] .. ARGV[8 + 4i]  per delivery (ACK_FIELDS of them): key, claim token, next due
             (ms on Redis's clock, the node's answer for a series with a spec, see record.lua;
             '' for any other task, and '0' when such a series has no run left), its run for
             the history (`<due ms>:<attempts>:<handler started ms>:<handler us>:<key length>:`,
             the times empty if it never started; '' to read it from the record: see
             includes/history.lua)
  Output:
    one digit per delivery, as one string: 1 acknowledged, 0 refused (a delivery whose cancel
    was requested ends as cancelled instead: see cancelled.lua).
  Keys: TASKS, LEASED, META, FIGURES, UPSERTS, CANCELLING, CLAIMED, HISTORY, and for a recurring
  task FAR, READY, CURSOR, WAKE.
]]
-- @include acknowledge
-- @include cancelled
-- @include claims
-- @include history
local tick_ms, slots = tonumber(ARGV[1]), tonumber(ARGV[2])
local history = history_of(ARGV[3], ARGV[4])
-- The deliveries: delivery j's key is ARGV[DELIVERIES_FROM + ACK_FIELDS * (j - 1)], the rest of
-- its fields after it.
local DELIVERIES_FROM = 5

end_cancelled(ARGV, DELIVERIES_FROM, history)
local answers = acknowledge(ARGV, DELIVERIES_FROM, tick_ms, slots, history)
flush_history(history)
return answers
