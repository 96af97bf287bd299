-- The last tick processed; a wheel opened without one starts at the current tick.
-- Keys: cursor.
-- @include keys
local function cursor_of(now, tick_ms)
  local c = redis.call('GET', CURSOR)
  if c then return tonumber(c) end
  c = math.floor(now / tick_ms)
  redis.call('SET', CURSOR, c)
  return c
end
