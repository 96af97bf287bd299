-- Ends as cancelled the deliveries listed in `list` from index `from` on (key, then claim token,
-- per delivery) whose cancel `cancel_running.lua` requested under that token: the record and
-- lease go, the request too, and the task counts as cancelled, whatever the handler's outcome
-- (the script that calls this then finds no record and refuses the outcome). Returns how many
-- it ended. While no cancel is requested it costs one HLEN.
-- Keys: CANCELLING, TASKS, LEASED, META, CLAIMED, HOLDERS.
-- @include keys
-- @include record
-- @include claims
local function end_cancelled(list, from)
  if redis.call('HLEN', CANCELLING) == 0 then return 0 end
  local n = 0
  for i = from, #list - 1, 2 do
    local k, tok = list[i], list[i + 1]
    if redis.call('HGET', CANCELLING, k) == tok then
      redis.call('HDEL', CANCELLING, k)
      local rec = redis.call('HGET', TASKS, k)
      if rec and token_of(rec) == tok then
        redis.call('HDEL', TASKS, k)
        redis.call('ZREM', LEASED, k)
        forget_claims({k})
        n = n + 1
      end
    end
  end
  if n > 0 then redis.call('HINCRBY', META, 'cancelled', n) end
  return n
end
