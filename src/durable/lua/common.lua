-- Helpers prepended to every script of the durable wheel.
--
-- ARGV[1] of every script is the wheel's key prefix, `tw:{<name>}:`; KEYS[1] is its `meta` key
-- (declared so that a cluster routes the call to the wheel's slot: every key shares the hash tag).
-- Numbers are whole milliseconds or ticks, well inside a double's exact range (due times are
-- capped below 1e14 ms by the client).

local P = ARGV[1]

-- Redis's clock in whole milliseconds, rounded down: the only clock the wheel uses. Deciding
-- that a time has come rounds down (never early); setting a time to come rounds up (`now_up`).
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- Redis's clock in whole milliseconds, rounded up: the base of due times and lease expiries, so
-- they are never before `delay` (or `lease`) after the call reached Redis.
local function now_up()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.ceil(tonumber(t[2]) / 1000)
end

-- The tick a task due at `due` ms is placed at: rounded up, so it is never early.
local function due_tick(due, tick_ms)
  local q = math.floor(due / tick_ms)
  if q * tick_ms < due then q = q + 1 end
  return q
end

-- The last tick processed; a wheel opened without one starts at the current tick.
local function cursor_of(now, tick_ms)
  local c = redis.call('GET', P .. 'cursor')
  if c then return tonumber(c) end
  c = math.floor(now / tick_ms)
  redis.call('SET', P .. 'cursor', c)
  return c
end

-- Puts task `k` (its hash already holds `due` and `tick`) where it waits: `ready` when its tick
-- has been reached by both the cursor and Redis's clock (`now_tick`, rounded down), its slot
-- when within the ring's revolution after the cursor, the far tier otherwise. The far tier also
-- takes a tick the cursor has passed but the clock has not (the clock stepped back, after a
-- failover to a host whose clock is behind, say): there the task waits for the clock, and its
-- slot would belong to the next revolution. Slots, the far tier and `ready` are all scored by
-- due ms. Returns true if ready.
local function place(k, tick, due, cursor, slots, now_tick)
  if tick <= cursor and tick <= now_tick then
    redis.call('ZADD', P .. 'ready', due, k)
    return true
  elseif tick > cursor and tick <= cursor + slots then
    if redis.call('ZADD', P .. 'slot:' .. (tick % slots), due, k) == 1 then
      redis.call('INCR', P .. 'ring')
    end
  else
    redis.call('ZADD', P .. 'far', due, k)
  end
  return false
end

-- Takes task `k` out of wherever it is (slot, far tier, ready or leased): O(log n) each.
local function unplace(k, tick, slots)
  if redis.call('ZREM', P .. 'slot:' .. (tick % slots), k) == 1 then
    redis.call('DECR', P .. 'ring')
  end
  redis.call('ZREM', P .. 'far', k)
  redis.call('ZREM', P .. 'ready', k)
  redis.call('ZREM', P .. 'leased', k)
end

-- ZADD of many (score, member) pairs at once; `pairs` is a flat list.
local function zadd_all(key, pairs)
  if #pairs > 0 then redis.call('ZADD', key, unpack(pairs)) end
end

-- Lets one idle worker know that tasks are ready (a worker that claims a full batch passes it on).
-- At most 8 tokens wait, so a burst leaves only a few wake-ups with nothing to claim behind it.
local function wake()
  redis.call('LPUSH', P .. 'wake', 1)
  redis.call('LTRIM', P .. 'wake', 0, 7)
end

-- Frees the key of finished task `k`, remembering its request id for `ttl` ms so that a late
-- retry of its `schedule` is recognised instead of creating the task again.
local function finish(k, ttl)
  local tk = P .. 't:' .. k
  local rid = redis.call('HGET', tk, 'rid')
  redis.call('DEL', tk)
  redis.call('ZREM', P .. 'leased', k)
  if rid then redis.call('SET', P .. 'done:' .. k, rid, 'PX', ttl) end
end

-- Whether the task last finished under key `k` (acknowledged, buried or cancelled, within the
-- remembered time) was scheduled by request `rid`: `done:<key>` holds its request id, followed
-- by `/<cancel id>` when it was cancelled.
local function finished_by(k, rid)
  local done = redis.call('GET', P .. 'done:' .. k)
  return done ~= false and (done == rid or string.sub(done, 1, #rid + 1) == rid .. '/')
end

-- Moves task `k` to the dead letters with its payload, deliveries and last error.
local function bury(k, attempts, err, now, ttl)
  local p = redis.call('HGET', P .. 't:' .. k, 'p') or ''
  redis.call('HSET', P .. 'd:' .. k, 'p', p, 'a', attempts, 'err', err)
  redis.call('ZADD', P .. 'dead', now, k)
  finish(k, ttl)
  redis.call('HINCRBY', P .. 'meta', 'dead_lettered', 1)
end

