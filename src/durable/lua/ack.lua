-- Acknowledges a delivery: the task is done and its key free again. Refused when the claim token
-- is not the task's current one (its lease ran out and another worker has it, or it was
-- cancelled or rescheduled), so a late worker never acknowledges someone else's delivery.
--
-- KEYS[1]  the wheel's meta key
-- ARGV[1]  key prefix   ARGV[2] key   ARGV[3] claim token   ARGV[4] ms to remember the request id
-- Returns  1 acknowledged, 0 refused (a repeated ack is refused and changes nothing).

local k = ARGV[2]
if redis.call('HGET', P .. 't:' .. k, 'tok') ~= ARGV[3] then return 0 end
finish(k, tonumber(ARGV[4]))
redis.call('HINCRBY', P .. 'meta', 'acked', 1)
return 1
