-- Ends as cancelled the deliveries listed in `list` from index `from` on (ACK_FIELDS entries per
-- delivery, as `acknowledge` takes them: key, claim token, next due, its run for the history; a
-- list of one delivery may stop after its token) whose cancel
-- `cancel_running.lua` requested under that token: the record and lease go, the request too,
-- the task counts as cancelled, whatever the handler's outcome (the script that calls this then
-- finds no record and refuses the outcome), and its run goes in the history `h` (history.lua).
-- An upsert queued behind a run it ends (queued.lua) goes with it, as a `cancel` drops one.
-- Returns how many it ended. While no cancel is requested it costs one HLEN.
-- Keys: CANCELLING, TASKS, LEASED, META, CLAIMED, HISTORY, UPSERTS.
-- @include keys
-- @include record
-- @include claims
-- @include constants
-- @include history
-- @include queued
-- @include limits
local function end_cancelled(list, from, h)
  if redis.call('HLEN', CANCELLING) == 0 then return 0 end
  local n = 0
  for i = from, #list - 1, ACK_FIELDS do
    local k, tok = list[i], list[i + 1]
    if redis.call('HGET', CANCELLING, k) == tok then
      redis.call('HDEL', CANCELLING, k)
      local rec = redis.call('HGET', TASKS, k)
      if rec and token_of(rec) == tok then
        redis.call('HDEL', TASKS, k)
        forget_claims({k}, {tok})
        release_limits({k})
        drop_queued({k})
        add_history(h, k, rec, 'c', list[i + 3])
        n = n + 1
      end
    end
  end
  if n > 0 then redis.call('HINCRBY', META, 'cancelled', n) end
  return n
end
