-- ZADD of many (score, member) pairs at once; `pairs` is a flat list.
local function zadd_all(key, pairs)
  if #pairs > 0 then redis.call('ZADD', key, unpack(pairs)) end
end
