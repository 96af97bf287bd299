-- The wheel as a placing script sees it: its tick and slots, Redis's clock (rounded down and up),
-- the cursor (the current tick when there is none yet), and the slot keys the caller declared
-- from `KEYS[from]` on, whose indices are the packed argument `indices` (nil: none declared).
-- Keys: CURSOR.
-- @include keys
-- @include clock
local function wheel_now(tick_ms, slots, from, indices)
  local down, up = clock()
  local now_tick = math.floor(down / tick_ms)
  return {
    tick_ms = tick_ms, slots = slots, down = down, up = up, now_tick = now_tick,
    cursor = tonumber(redis.call('GET', CURSOR) or now_tick), declared = declared_slots(from, indices),
  }
end
