-- The tick a task due at `due` ms is placed at: rounded up, so it is never early.
local floor = math.floor
local function due_tick(due, tick_ms)
  local q = floor(due / tick_ms)
  if q * tick_ms < due then q = q + 1 end
  return q
end
