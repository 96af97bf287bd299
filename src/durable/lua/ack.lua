--[[ Acknowledges deliveries: each task is done and its key free again, or, for a recurring task
  with runs to come, moved on to its next run (see includes/advance.lua), placed in the far tier
  or `ready` (this call names no ring slot; the tick promotes it into the ring). A delivery whose claim
  token is not the task's current one (its lease ran out and another worker has it, or it was
  cancelled or moved after its lease ran out) is refused, so a late worker never acknowledges
  someone else's delivery. A repeated ack is refused and changes nothing.

  Input:
    KEYS     the wheel's keys
    ARGV[1]  tick in ms   ARGV[2] slots
    ARGV[3 + 2i], ARGV[4 + 2i]  per delivery: key, claim token
  Output:
    one integer per delivery: 1 acknowledged, 0 refused.
  Keys: TASKS, LEASED, META, and for a recurring task FAR, READY, CURSOR, WAKE.
]]
-- @include keys
-- @include wheel_now
-- @include record
-- @include advance
-- @include place
-- @include zrem_all
-- @include hash_all
-- @include wake
local tick_ms, slots = tonumber(ARGV[1]), tonumber(ARGV[2])
-- The deliveries: delivery j's key is ARGV[DELIVERIES_FROM + 2j - 2], its claim token the next.
local DELIVERIES_FROM = 3

local out, acked, done, w, batch = {}, {}, {}, nil, new_batch()
local seen = {}
local names, recs = records_of(ARGV, DELIVERIES_FROM, 2)
for j, k in ipairs(names) do
  local rec, tok = recs[j], ARGV[DELIVERIES_FROM + 2 * j - 1]
  local _, current, every
  if rec then _, current, every = head_of(rec) end
  -- A key twice in one call is acknowledged once: the records were read before any change.
  if rec and current == tok and not seen[k] then
    seen[k] = true
    acked[#acked + 1] = k
    local t = every ~= '0' and decode(rec)
    w = w or (t and wheel_now(tick_ms, slots, #KEYS + 1, nil))
    if t and advance(t, w.down) then
      redis.call('HSET', TASKS, k, encode(t))
      place(k, t.due, w, batch)
    else
      done[#done + 1] = k
    end
    out[#out + 1] = 1
  else
    out[#out + 1] = 0
  end
end
if #acked > 0 then
  zrem_all(LEASED, acked)
  if #done > 0 then zrem_all(TASKS, done, 'HDEL') end
  if flush(batch) then wake() end
  redis.call('HINCRBY', META, 'acked', #acked)
end
return out
