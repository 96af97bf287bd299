-- RPUSH of many values at once, in runs of 4,000 (well within what Lua passes to one call).
-- Returns how many it pushed.
local function rpush_all(key, values)
  for i = 1, #values, 4000 do redis.call('RPUSH', key, unpack(values, i, math.min(i + 3999, #values))) end
  return #values
end
