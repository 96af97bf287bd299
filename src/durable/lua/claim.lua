-- Claims up to n ready tasks, oldest due first, for one worker: each is leased until Redis's
-- now + lease, gets a fresh claim token and one more delivery.
--
-- KEYS[1]  the wheel's meta key
-- ARGV[1]  key prefix   ARGV[2] n   ARGV[3] lease in ms
-- Returns  a flat array, five entries per task: key, payload, attempt, due ms, claim token.

local n, lease = tonumber(ARGV[2]), tonumber(ARGV[3])
local popped = redis.call('ZPOPMIN', P .. 'ready', n)
if #popped == 0 then return {} end
local now = now_up()
local count = #popped / 2
local last = redis.call('INCRBY', P .. 'seq', count)
local out, leases = {}, {}
for i = 1, #popped, 2 do
  local k = popped[i]
  local tk = P .. 't:' .. k
  local h = redis.call('HMGET', tk, 'p', 'due')
  if h[1] then
    local tok = tostring(last - count + (i + 1) / 2)
    local a = redis.call('HINCRBY', tk, 'a', 1)
    redis.call('HSET', tk, 'tok', tok)
    leases[#leases + 1] = now + lease
    leases[#leases + 1] = k
    out[#out + 1] = k
    out[#out + 1] = h[1]
    out[#out + 1] = tostring(a)
    out[#out + 1] = h[2]
    out[#out + 1] = tok
  end
end
zadd_all(P .. 'leased', leases)
redis.call('HINCRBY', P .. 'meta', 'handed_out', #out / 5)
return out
