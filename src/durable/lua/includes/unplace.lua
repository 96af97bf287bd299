-- Takes task `k` out of wherever it is (slot, far tier, ready or leased): O(log n) each.
-- Keys: slot:<i>, ring, far, ready, leased.
-- @include keys
local function unplace(k, tick, slots)
  if redis.call('ZREM', slot_key(tick % slots), k) == 1 then
    redis.call('DECR', RING)
  end
  redis.call('ZREM', FAR, k)
  redis.call('ZREM', READY, k)
  redis.call('ZREM', LEASED, k)
end
