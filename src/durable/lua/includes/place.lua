-- Where a task due at `due` ms waits, by its tick `t`: `ready` when both the cursor and Redis's
-- clock (`now_tick`, rounded down) have reached it; its ring slot when `t` is within the
-- revolution after the cursor and the caller declared that slot's key; the far tier otherwise
-- (beyond the revolution, a slot not declared, or a tick the cursor passed but the clock has
-- not: the clock stepped back, and the slot would belong to the next revolution). Ring entries
-- are written at once (one key per slot); `ready` and far pairs are gathered in `batch` for
-- `flush`. Returns true if ready.
-- Keys: the declared slot keys, and through flush READY, FAR, RING.
-- @include keys
-- @include due_tick
-- @include zadd_all
local function new_batch()
  return {ready = {}, far = {}, ring = 0}
end
local function place(k, due, w, batch)
  local t = due_tick(due, w.tick_ms)
  local list
  if t <= w.cursor and t <= w.now_tick then
    list = batch.ready
  elseif t > w.cursor and t <= w.cursor + w.slots and w.declared[slot_key(t % w.slots)] then
    batch.ring = batch.ring + redis.call('ZADD', slot_key(t % w.slots), due, k)
    return false
  else
    list = batch.far
  end
  list[#list + 1] = due
  list[#list + 1] = k
  return list == batch.ready
end
-- Writes the gathered pairs; returns true if any task became ready.
local function flush(batch)
  zadd_all(READY, batch.ready)
  zadd_all(FAR, batch.far)
  if batch.ring > 0 then redis.call('INCRBY', RING, batch.ring) end
  return #batch.ready > 0
end
