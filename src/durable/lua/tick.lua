--[[ Moves the cursor towards Redis's current tick, if the caller holds the leadership: requeues
  tasks whose lease expired, promotes far-tier tasks that come within one revolution, and moves
  the tasks of each tick it passes from their slot to `ready`. Renews the leadership.

  Bounded: at most `budget` tasks and `max_steps` ticks per call; the reply says when more is
  left, and the caller calls again at once. A retried or repeated call is harmless: a task is
  moved to `ready` only once the cursor has reached its absolute due tick.

  When the ring is empty the cursor jumps straight to the current tick (an idle wheel costs O(1)
  per call). Far-tier tasks already due by Redis's clock go straight to `ready`, so a wheel left
  alone for days catches up in at most one revolution of steps plus one call per `budget` tasks.
  A task reaches `ready` only when its due tick is at or before Redis's current tick: never early.

  Input:
    KEYS[1]  the wheel's meta key
    ARGV[1]  key prefix   ARGV[2] fencing token (the leader key's value)   ARGV[3] tick in ms
    ARGV[4]  slots   ARGV[5] the leadership's lease in ms   ARGV[6] budget   ARGV[7] max_steps
    ARGV[8]  max attempts   ARGV[9] ms to remember a finished task's request id
  Output:
    {'refused'} if the token is not the leader's; else {'more' or 'done', cursor, Redis time in
    ms, tasks made ready}.
  Keys: leader, cursor, ring, leased, far, slot:<i>, ready, t:<key>, meta, wake, and for a task
  that dies d:<key>, dead, done:<key>.
]]
-- @include keys
-- @include now_ms
-- @include due_tick
-- @include cursor_of
-- @include zadd_all
-- @include wake
-- @include bury
local token, tick_ms, slots, lease = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local budget, max_steps, max_attempts, ttl = tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9])

-- Leases that ran out: each task goes back to `ready`, or to the dead letters after its last
-- try. Returns how many leases it looked at and how many tasks it made ready.
local function requeue_expired(now)
  local expired = redis.call('ZRANGEBYSCORE', LEASED, '-inf', now, 'LIMIT', 0, budget)
  local ready = 0
  for _, k in ipairs(expired) do
    redis.call('ZREM', LEASED, k)
    local tk = task_key(k)
    local h = redis.call('HMGET', tk, 'a', 'due')
    if h[1] then
      local a = tonumber(h[1])
      if a >= max_attempts then
        bury(k, a, 'lease expired', now, ttl)
      else
        redis.call('HDEL', tk, 'tok')
        redis.call('HSET', tk, 'err', 'lease expired')
        redis.call('ZADD', READY, h[2], k)
        redis.call('HINCRBY', META, 'retried', 1)
        ready = ready + 1
      end
    end
  end
  return #expired, ready
end

-- The far tier's tasks within one revolution of the cursor enter the ring, and those already
-- due by Redis's clock go straight to `ready` (after an outage longer than a revolution that is
-- all of them up to now). The lowest-scored ones come first, so they are removed by rank in one
-- command. A task the cursor passed but the clock has not reached (it stepped back) stays in
-- the far tier, waiting for the clock. Returns how many left the far tier and how many of them
-- became ready.
local function promote_far(cursor, now_tick, room)
  local horizon = math.max(cursor + slots, now_tick)
  local far = redis.call('ZRANGEBYSCORE', FAR, '-inf', horizon * tick_ms, 'WITHSCORES', 'LIMIT', 0, room)
  if #far == 0 then return 0, 0 end
  redis.call('ZREMRANGEBYRANK', FAR, 0, #far / 2 - 1)
  local to_ready, into_ring, keep = {}, 0, {}
  for i = 1, #far, 2 do
    local k, due = far[i], tonumber(far[i + 1])
    local tick = due_tick(due, tick_ms)
    if tick <= now_tick then
      to_ready[#to_ready + 1] = due
      to_ready[#to_ready + 1] = k
    elseif tick > cursor then
      into_ring = into_ring + redis.call('ZADD', slot_key(tick % slots), due, k)
    else
      keep[#keep + 1] = due
      keep[#keep + 1] = k
    end
  end
  zadd_all(READY, to_ready)
  zadd_all(FAR, keep)
  if into_ring > 0 then redis.call('INCRBY', RING, into_ring) end
  return (#far - #keep) / 2, #to_ready / 2
end

-- Moves the tasks of the tick after the cursor from their slot to `ready`, up to `room` of
-- them. Returns the new cursor (unchanged while the slot still holds tasks), how many tasks it
-- moved and how many became ready.
local function step_ring(cursor, room)
  local c = cursor + 1
  local sk = slot_key(c % slots)
  local popped = redis.call('ZPOPMIN', sk, room)
  local ready = 0
  if #popped > 0 then
    redis.call('DECRBY', RING, #popped / 2)
    local to_ready = {}
    for i = 1, #popped, 2 do
      local k, due = popped[i], tonumber(popped[i + 1])
      if due_tick(due, tick_ms) <= c then
        to_ready[#to_ready + 1] = due
        to_ready[#to_ready + 1] = k
      else
        -- Not this revolution's (cannot happen while the ring invariant holds): keep it safe.
        redis.call('ZADD', FAR, due, k)
      end
    end
    zadd_all(READY, to_ready)
    ready = #to_ready / 2
  end
  if redis.call('EXISTS', sk) == 1 then return cursor, #popped / 2, ready end
  return c, #popped / 2, ready
end

if redis.call('GET', LEADER) ~= token then return {'refused'} end
redis.call('PEXPIRE', LEADER, lease)

local now = now_ms()
local now_tick = math.floor(now / tick_ms)
local cursor = cursor_of(now, tick_ms)
local work, ready = requeue_expired(now)
local steps = 0
while work < budget do
  local moved, made_ready = promote_far(cursor, now_tick, budget - work)
  work, ready = work + moved, ready + made_ready
  if work >= budget or cursor >= now_tick or steps >= max_steps then break end
  if tonumber(redis.call('GET', RING) or '0') <= 0 then
    -- Nothing in the ring: every tick up to now is empty; the far tier follows next round.
    cursor = now_tick
  else
    local next_cursor, stepped, made = step_ring(cursor, budget - work)
    work, ready = work + stepped, ready + made
    if next_cursor == cursor then break end
    cursor = next_cursor
  end
  redis.call('SET', CURSOR, cursor)
  steps = steps + 1
end

if ready > 0 then wake() end
local more = 'done'
if work >= budget or cursor < now_tick then more = 'more' end
return {more, tostring(cursor), tostring(now), tostring(ready)}
