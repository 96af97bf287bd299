-- ZREM (or HDEL, with `cmd`) of many members at once, in runs of 4,000.
local function zrem_all(key, members, cmd)
  for i = 1, #members, 4000 do
    redis.call(cmd or 'ZREM', key, unpack(members, i, math.min(i + 3999, #members)))
  end
end
