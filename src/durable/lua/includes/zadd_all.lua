-- ZADD of many (score, member) pairs at once; `pairs` is a flat list. In runs of 4,000 values,
-- well within what Lua passes to one call.
local function zadd_all(key, pairs)
  for i = 1, #pairs, 4000 do
    redis.call('ZADD', key, unpack(pairs, i, math.min(i + 3999, #pairs)))
  end
end
