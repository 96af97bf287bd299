-- Puts task `k` (its hash already holds `due` and `tick`) where it waits: `ready` when its tick
-- has been reached by both the cursor and Redis's clock (`now_tick`, rounded down), its slot
-- when within the ring's revolution after the cursor, the far tier otherwise. The far tier also
-- takes a tick the cursor has passed but the clock has not (the clock stepped back, after a
-- failover to a host whose clock is behind, say): there the task waits for the clock, and its
-- slot would belong to the next revolution. Slots, the far tier and `ready` are all scored by
-- due ms. Returns true if ready.
-- Keys: ready, slot:<i>, ring, far.
-- @include keys
local function place(k, tick, due, cursor, slots, now_tick)
  if tick <= cursor and tick <= now_tick then
    redis.call('ZADD', READY, due, k)
    return true
  elseif tick > cursor and tick <= cursor + slots then
    if redis.call('ZADD', slot_key(tick % slots), due, k) == 1 then
      redis.call('INCR', RING)
    end
  else
    redis.call('ZADD', FAR, due, k)
  end
  return false
end
