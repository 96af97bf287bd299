--[[ Acknowledges deliveries: each task is done and its key free again. A delivery whose claim
  token is not the task's current one (its lease ran out and another worker has it, or it was
  cancelled or moved after its lease ran out) is refused, so a late worker never acknowledges
  someone else's delivery. A repeated ack is refused and changes nothing.

  Input:
    KEYS[1]  the wheel's meta key
    ARGV[1]  key prefix   ARGV[2] ms to remember a finished task's request id
    ARGV[3 + 2i], ARGV[4 + 2i]  per delivery: key, claim token
  Output:
    one integer per delivery: 1 acknowledged, 0 refused.
  Keys: t:<key>, leased, done:<key>, meta.
]]
-- @include keys
-- @include finish
local ttl = tonumber(ARGV[2])

local out, acked = {}, 0
for i = 3, #ARGV, 2 do
  local k, tok = ARGV[i], ARGV[i + 1]
  if redis.call('HGET', task_key(k), 'tok') == tok then
    finish(k, ttl)
    acked = acked + 1
    out[#out + 1] = 1
  else
    out[#out + 1] = 0
  end
end
if acked > 0 then redis.call('HINCRBY', META, 'acked', acked) end
return out
