-- Where a task due at `due` ms waits, by its tick `t`: `ready` when Redis's clock (`now_tick`,
-- rounded down) has reached the tick before, or the cursor has passed it (the cursor runs a tick
-- ahead of the clock, more on a slow link: tick.lua; `claim.lua` hands a ready task out once it
-- is due, and its slot, if the cursor has not passed it, has no entry for it; after the clock
-- stepped back, a task the cursor passed waits there until due too); its ring slot when `t` is
-- within the revolution after the cursor and the caller declared that slot's key; the far tier
-- otherwise (beyond the revolution, or a slot not declared). Entries are
-- gathered in `batch` and written by `flush`: one ZADD for `ready`, one for the far tier and one
-- RPUSH per slot, whatever the number of tasks (a slot's first entry is kept as a string, and
-- only a second makes a list of them). Except with `new_batch(own_slots)` true, which a caller
-- passes when it named no slot for two tasks, so that every slot most likely gets one entry: then
-- `place` pushes each slot entry at once, one RPUSH a task, which costs less than gathering.
-- Either way the same entries are written. A slot holds keys alone: its tick says when they are
-- due. `dues`, if given, is `due` as a string (the score written to `ready` or the far tier, so
-- that Redis does not format a Lua number). Returns true if ready.
-- It runs once per task of a schedule call: each field is read once.
-- Keys: the declared slot keys, and through flush READY, FAR, RING.
-- @include keys
-- @include due_tick
-- @include zadd_all
-- @include rpush_all
local function new_batch(own_slots)
  return {ready = {}, far = {}, ring = {}, own_slots = own_slots, pushed = 0}
end
local function place(k, due, w, batch, dues)
  local cursor = w.cursor
  local t = due_tick(due, w.tick_ms)
  local list
  if t <= w.now_tick + 1 or t <= cursor then
    list = batch.ready
  else
    local sk = t > cursor and t <= cursor + w.slots and w.declared[t % w.slots]
    if sk then
      if batch.own_slots then
        redis.call('RPUSH', sk, k)
        batch.pushed = batch.pushed + 1
        return false
      end
      local entries = batch.ring[sk]
      if entries == nil then
        batch.ring[sk] = k
      elseif type(entries) == 'string' then
        batch.ring[sk] = {entries, k}
      else
        entries[#entries + 1] = k
      end
      return false
    end
    list = batch.far
  end
  local n = #list
  list[n + 1] = dues or due
  list[n + 2] = k
  return list == batch.ready
end
-- Writes the gathered entries; returns true if any task became ready.
local function flush(batch)
  zadd_all(READY, batch.ready)
  zadd_all(FAR, batch.far)
  local added = batch.pushed
  for sk, entries in pairs(batch.ring) do
    if type(entries) == 'string' then
      redis.call('RPUSH', sk, entries)
      added = added + 1
    else
      added = added + rpush_all(sk, entries)
    end
  end
  if added > 0 then redis.call('INCRBY', RING, added) end
  return #batch.ready > 0
end
