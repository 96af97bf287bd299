--[[ Reports a failed delivery: the task is retried after backoff * 2^(attempt-1) (capped)
  through the wheel, or goes to the dead letters after its last attempt. Refused, like ack, when
  the claim token is not the task's current one.

  Input:
    KEYS[1]  the wheel's meta key
    ARGV[1]  key prefix   ARGV[2] key   ARGV[3] claim token   ARGV[4] error text
    ARGV[5]  max attempts   ARGV[6] backoff base in ms   ARGV[7] backoff cap in ms
    ARGV[8]  tick in ms   ARGV[9] slots   ARGV[10] ms to remember the request id
  Output:
    1 retried, 2 dead, 0 refused.
  Keys: t:<key>, leased, cursor, meta, wake, its new place (slot:<i>, ring, far, ready), and
  when it dies d:<key>, dead, done:<key>.
]]
-- @include keys
-- @include now_ms
-- @include now_up
-- @include due_tick
-- @include cursor_of
-- @include place
-- @include wake
-- @include bury
local k, tok, err = ARGV[2], ARGV[3], ARGV[4]
local max_attempts, backoff_ms, backoff_cap_ms = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
local tick_ms, slots, ttl = tonumber(ARGV[8]), tonumber(ARGV[9]), tonumber(ARGV[10])

local tk = task_key(k)
local h = redis.call('HMGET', tk, 'tok', 'a')
if h[1] ~= tok then return 0 end
local a = tonumber(h[2])
local now = now_up()
if a >= max_attempts then
  bury(k, a, err, now, ttl)
  return 2
end
redis.call('ZREM', LEASED, k)
local due = now + math.min(backoff_cap_ms, backoff_ms * 2 ^ (a - 1))
local tick = due_tick(due, tick_ms)
redis.call('HSET', tk, 'due', due, 'tick', tick, 'err', err)
redis.call('HDEL', tk, 'tok')
if place(k, tick, due, cursor_of(now, tick_ms), slots, math.floor(now_ms() / tick_ms)) then wake() end
redis.call('HINCRBY', META, 'retried', 1)
return 1
