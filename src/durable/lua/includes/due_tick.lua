-- The tick a task due at `due` ms is placed at: rounded up, so it is never early.
local function due_tick(due, tick_ms)
  local q = math.floor(due / tick_ms)
  if q * tick_ms < due then q = q + 1 end
  return q
end
