--[[ Acknowledges deliveries: each task is done and its key free again, or, for a recurring task
  with runs to come, moved on to its next run (see includes/acknowledge.lua). A delivery whose
  claim token is not the task's current one (its lease ran out and another worker has it, or it
  was cancelled or moved after its lease ran out) is refused, so a late worker never
  acknowledges someone else's delivery. A repeated ack is refused and changes nothing. A worker
  sends its acknowledgements with its next claim (claim.lua) when one is on its way, and here
  when none is.

  Input:
    KEYS     the wheel's keys
    ARGV[1]  tick in ms   ARGV[2] slots
    ARGV[3 + 2i], ARGV[4 + 2i]  per delivery: key, claim token
  Output:
    one digit per delivery, as one string: 1 acknowledged, 0 refused (a delivery whose cancel
    was requested ends as cancelled instead: see cancelled.lua).
  Keys: TASKS, LEASED, META, FIGURES, CANCELLING, CLAIMED, HOLDERS, and for a recurring task FAR, READY, CURSOR, WAKE.
]]
-- @include acknowledge
-- @include cancelled
-- @include claims
local tick_ms, slots = tonumber(ARGV[1]), tonumber(ARGV[2])
-- The deliveries: delivery j's key is ARGV[DELIVERIES_FROM + 2j - 2], its claim token the next.
local DELIVERIES_FROM = 3

end_cancelled(ARGV, DELIVERIES_FROM)
local answers = acknowledge(ARGV, DELIVERIES_FROM, tick_ms, slots)
forget_acknowledged(ARGV, DELIVERIES_FROM, answers)
return answers
