-- Moves the cursor towards Redis's current tick, if the caller holds the leadership: requeues
-- tasks whose lease expired, promotes far-tier tasks that come within one revolution, and moves
-- the tasks of each tick it passes from their slot to `ready`. Renews the leadership.
--
-- Bounded: at most `budget` tasks and `max_steps` ticks per call; the reply says when more is
-- left, and the caller calls again at once. A retried or repeated call is harmless: a task is
-- moved to `ready` only once the cursor has reached its absolute due tick.
--
-- When the ring is empty the cursor jumps straight to the current tick (an idle wheel costs O(1)
-- per call). Far-tier tasks already due by Redis's clock go straight to `ready`, so a wheel left
-- alone for days catches up in at most one revolution of steps plus one call per `budget` tasks.
-- A task reaches `ready` only when its due tick is at or before Redis's current tick: never early.
--
-- KEYS[1]  the wheel's meta key
-- ARGV[1]  key prefix   ARGV[2] fencing token (the leader key's value)   ARGV[3] tick in ms
-- ARGV[4]  slots   ARGV[5] the leadership's lease in ms   ARGV[6] budget   ARGV[7] max_steps
-- ARGV[8]  max attempts   ARGV[9] ms to remember a finished task's request id
-- Returns  {'refused'} if the token is not the leader's; else {'more' or 'done', cursor, Redis
--          time in ms, tasks made ready}.

if redis.call('GET', P .. 'leader') ~= ARGV[2] then return {'refused'} end
local tick_ms, slots, lease = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local budget, max_steps, max_attempts = tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])
local ttl = tonumber(ARGV[9])
redis.call('PEXPIRE', P .. 'leader', lease)

local now = now_ms()
local now_tick = math.floor(now / tick_ms)
local cursor = cursor_of(now, tick_ms)
local work, ready, steps = 0, 0, 0

-- Leases that ran out: the task goes back to `ready` (or to the dead letters after its last try).
local expired = redis.call('ZRANGEBYSCORE', P .. 'leased', '-inf', now, 'LIMIT', 0, budget)
for _, k in ipairs(expired) do
  redis.call('ZREM', P .. 'leased', k)
  local tk = P .. 't:' .. k
  local h = redis.call('HMGET', tk, 'a', 'due')
  if h[1] then
    local a = tonumber(h[1])
    if a >= max_attempts then
      bury(k, a, 'lease expired', now, ttl)
    else
      redis.call('HDEL', tk, 'tok')
      redis.call('HSET', tk, 'err', 'lease expired')
      redis.call('ZADD', P .. 'ready', h[2], k)
      redis.call('HINCRBY', P .. 'meta', 'retried', 1)
      ready = ready + 1
    end
  end
end
work = #expired

while work < budget do
  -- The far tier's tasks within one revolution of the cursor enter the ring, and those already
  -- due by Redis's clock go straight to `ready` (after an outage longer than a revolution that
  -- is all of them up to now). The lowest-scored ones come first, so they are removed by rank
  -- in one command.
  local horizon = math.max(cursor + slots, now_tick)
  local far = redis.call('ZRANGEBYSCORE', P .. 'far', '-inf', horizon * tick_ms, 'WITHSCORES', 'LIMIT', 0,
    budget - work)
  if #far > 0 then
    redis.call('ZREMRANGEBYRANK', P .. 'far', 0, #far / 2 - 1)
    local to_ready, into_ring, keep = {}, 0, {}
    for i = 1, #far, 2 do
      local k, due = far[i], tonumber(far[i + 1])
      local tick = due_tick(due, tick_ms)
      if tick <= now_tick then
        to_ready[#to_ready + 1] = due
        to_ready[#to_ready + 1] = k
      elseif tick > cursor then
        into_ring = into_ring + redis.call('ZADD', P .. 'slot:' .. (tick % slots), due, k)
      else
        -- Passed by the cursor but not yet due by the clock (it stepped back): it waits here
        -- for the clock. The cursor does not move meanwhile, so this call ends below.
        keep[#keep + 1] = due
        keep[#keep + 1] = k
      end
    end
    zadd_all(P .. 'ready', to_ready)
    zadd_all(P .. 'far', keep)
    ready = ready + #to_ready / 2
    if into_ring > 0 then redis.call('INCRBY', P .. 'ring', into_ring) end
    work = work + (#far - #keep) / 2
  end
  if work >= budget or cursor >= now_tick or steps >= max_steps then break end

  if tonumber(redis.call('GET', P .. 'ring') or '0') <= 0 then
    -- Nothing in the ring: every tick up to now is empty; the far tier follows next round.
    cursor = now_tick
  else
    local c = cursor + 1
    local sk = P .. 'slot:' .. (c % slots)
    local popped = redis.call('ZPOPMIN', sk, budget - work)
    if #popped > 0 then
      redis.call('DECRBY', P .. 'ring', #popped / 2)
      local to_ready = {}
      for i = 1, #popped, 2 do
        local k, due = popped[i], tonumber(popped[i + 1])
        if due_tick(due, tick_ms) <= c then
          to_ready[#to_ready + 1] = due
          to_ready[#to_ready + 1] = k
        else
          -- Not this revolution's (cannot happen while the ring invariant holds): keep it safe.
          redis.call('ZADD', P .. 'far', due, k)
        end
      end
      zadd_all(P .. 'ready', to_ready)
      ready = ready + #to_ready / 2
      work = work + #popped / 2
    end
    if redis.call('EXISTS', sk) == 1 then break end
    cursor = c
  end
  redis.call('SET', P .. 'cursor', cursor)
  steps = steps + 1
end

if ready > 0 then wake() end
local more = 'done'
if work >= budget or cursor < now_tick then more = 'more' end
return {more, tostring(cursor), tostring(now), tostring(ready)}
