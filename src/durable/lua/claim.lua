--[[ Claims up to n ready tasks, oldest due first, for one worker: each is leased until Redis's
  now + lease, gets a fresh claim token and one more delivery.

  Safe to retry: the call carries a claim id (the worker keeps it until a reply arrives) and
  remembers, for the lease (at most a minute or so: long enough for the worker's retries), which
  tasks it claimed under which tokens; the worker's next claim drops the record. A retry whose
  first attempt landed gets those tasks again (those still held under their tokens), instead of
  leaving them leased to nobody until the lease runs out, which would cost each an attempt.

  Input:
    KEYS[1]  the wheel's meta key
    ARGV[1]  key prefix   ARGV[2] n   ARGV[3] lease in ms   ARGV[4] claim id
    ARGV[5]  '1' to only get back what an earlier attempt took (a stopping worker), else '0'
    ARGV[6]  ms to remember what this claim took (at most the lease)
    ARGV[7]  the id of this worker's previous claim, answered and so no longer needed, or ''
  Output:
    {claimed ms (Redis's clock, when this claim first ran), then five entries per task: key,
    payload, attempt, due ms, claim token}, or {} when it took nothing.
  Keys: claim:<id>, ready, seq, t:<key>, leased, meta.
]]
-- @include keys
-- @include now_up
-- @include zadd_all
local n, lease, claim_id = tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
local replay_only, record_ms, previous = ARGV[5] == '1', tonumber(ARGV[6]), ARGV[7]

local ck = claim_key(claim_id)
if previous ~= '' then redis.call('DEL', claim_key(previous)) end
local out = {}

local before = redis.call('LRANGE', ck, 0, -1)
if #before > 0 then
  out[1] = before[1]
  for i = 2, #before, 2 do
    local k, tok = before[i], before[i + 1]
    local h = redis.call('HMGET', task_key(k), 'p', 'a', 'due', 'tok')
    if h[4] == tok then
      out[#out + 1] = k
      out[#out + 1] = h[1]
      out[#out + 1] = h[2]
      out[#out + 1] = h[3]
      out[#out + 1] = tok
    end
  end
  return out
end

if replay_only then return {} end

local popped = redis.call('ZPOPMIN', READY, n)
if #popped == 0 then return {} end
local now = now_up()
local count = #popped / 2
local last = redis.call('INCRBY', SEQ, count)
local leases, claimed = {}, {tostring(now)}
out[1] = tostring(now)
for i = 1, #popped, 2 do
  local k = popped[i]
  local tk = task_key(k)
  local h = redis.call('HMGET', tk, 'p', 'due')
  if h[1] then
    local tok = tostring(last - count + (i + 1) / 2)
    local a = redis.call('HINCRBY', tk, 'a', 1)
    redis.call('HSET', tk, 'tok', tok)
    leases[#leases + 1] = now + lease
    leases[#leases + 1] = k
    claimed[#claimed + 1] = k
    claimed[#claimed + 1] = tok
    out[#out + 1] = k
    out[#out + 1] = h[1]
    out[#out + 1] = tostring(a)
    out[#out + 1] = h[2]
    out[#out + 1] = tok
  end
end
zadd_all(LEASED, leases)
if #claimed > 1 then
  redis.call('RPUSH', ck, unpack(claimed))
  redis.call('PEXPIRE', ck, math.min(lease, record_ms))
end
redis.call('HINCRBY', META, 'handed_out', (#out - 1) / 5)
if #out == 1 then return {} end
return out
