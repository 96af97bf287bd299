--[[ Claims up to n ready tasks, oldest due first, for one worker: each is leased until Redis's
  now + lease, gets a fresh claim token and one more delivery.

  Safe to retry: the call carries a claim id (the worker keeps it until a reply arrives) and
  remembers in CALL_KEY, for the lease (at most a minute or so: long enough for the worker's
  retries), which tasks it claimed under which tokens; the worker's next claim drops the record
  (PREVIOUS_KEY). A retry whose first attempt landed gets those tasks again (those still held
  under their tokens), instead of leaving them leased to nobody until the lease runs out, which
  would cost each an attempt.

  Input:
    KEYS     the wheel's keys, then CALL_KEY (this claim's record), then PREVIOUS_KEY (the
             record of this worker's previous claim, answered and so no longer needed; the same
             as CALL_KEY when there is none)
    ARGV[1]  n   ARGV[2] lease in ms
    ARGV[3]  '1' to only get back what an earlier attempt took (a stopping worker), else '0'
    ARGV[4]  ms to remember what this claim took (at most the lease)
  Output:
    {claimed ms (Redis's clock, when this claim first ran), then five entries per task: key,
    payload, attempt, due ms, claim token}, or {} when it took nothing.
  Keys: CALL_KEY, PREVIOUS_KEY, READY, SEQ, TASKS, LEASED, META.
]]
-- @include keys
-- @include clock
-- @include record
-- @include zadd_all
-- @include hash_all
local n, lease = tonumber(ARGV[1]), tonumber(ARGV[2])
local replay_only, record_ms = ARGV[3] == '1', tonumber(ARGV[4])

if PREVIOUS_KEY ~= CALL_KEY then redis.call('DEL', PREVIOUS_KEY) end
local out = {}

local before = redis.call('LRANGE', CALL_KEY, 0, -1)
if #before > 0 then
  out[1] = before[1]
  for i = 2, #before, 2 do
    local k, tok = before[i], before[i + 1]
    local rec = redis.call('HGET', TASKS, k)
    if rec and token_of(rec) == tok then
      local t = decode(rec)
      out[#out + 1] = k
      out[#out + 1] = t.p
      out[#out + 1] = tostring(t.a)
      out[#out + 1] = tostring(t.due)
      out[#out + 1] = tok
    end
  end
  return out
end

if replay_only then return {} end

local popped = redis.call('ZPOPMIN', READY, n)
if #popped == 0 then return {} end
local _, now = clock()
local count = #popped / 2
local last = redis.call('INCRBY', SEQ, count)
local leases, claimed, records = {}, {tostring(now)}, {}
out[1] = tostring(now)
local names, recs = records_of(popped, 1, 2)
for j, k in ipairs(names) do
  local rec = recs[j]
  if rec then
    local t = decode(rec)
    t.tok = tostring(last - count + j)
    t.a = t.a + 1
    records[#records + 1] = k
    records[#records + 1] = encode(t)
    leases[#leases + 1] = now + lease
    leases[#leases + 1] = k
    claimed[#claimed + 1] = k
    claimed[#claimed + 1] = t.tok
    out[#out + 1] = k
    out[#out + 1] = t.p
    out[#out + 1] = tostring(t.a)
    out[#out + 1] = tostring(t.due)
    out[#out + 1] = t.tok
  end
end
zadd_all(LEASED, leases)
hset_all(TASKS, records)
if #claimed > 1 then
  redis.call('RPUSH', CALL_KEY, unpack(claimed))
  redis.call('PEXPIRE', CALL_KEY, math.min(lease, record_ms))
end
redis.call('HINCRBY', META, 'handed_out', (#out - 1) / 5)
if #out == 1 then return {} end
return out
