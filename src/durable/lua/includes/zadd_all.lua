-- ZADD of many (score, member) pairs at once; `pairs` is a flat list. In runs of 4,000 values,
-- well within what Lua passes to one call. Returns how many members were new.
local function zadd_all(key, pairs)
  local added = 0
  for i = 1, #pairs, 4000 do
    added = added + redis.call('ZADD', key, unpack(pairs, i, math.min(i + 3999, #pairs)))
  end
  return added
end
