--[[ Acknowledges deliveries: each task is done and its key free again. A delivery whose claim
  token is not the task's current one (its lease ran out and another worker has it, or it was
  cancelled or moved after its lease ran out) is refused, so a late worker never acknowledges
  someone else's delivery. A repeated ack is refused and changes nothing.

  Input:
    KEYS     the wheel's keys
    ARGV[1 + 2i], ARGV[2 + 2i]  per delivery: key, claim token
  Output:
    one integer per delivery: 1 acknowledged, 0 refused.
  Keys: TASKS, LEASED, META.
]]
-- @include keys
-- @include record
-- @include zrem_all

local out, done = {}, {}
for i = 1, #ARGV, 2 do
  local k, tok = ARGV[i], ARGV[i + 1]
  local rec = redis.call('HGET', TASKS, k)
  if rec and token_of(rec) == tok then
    done[#done + 1] = k
    out[#out + 1] = 1
  else
    out[#out + 1] = 0
  end
end
if #done > 0 then
  zrem_all(TASKS, done, 'HDEL')
  zrem_all(LEASED, done)
  redis.call('HINCRBY', META, 'acked', #done)
end
return out
