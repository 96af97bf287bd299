-- ZADD of many (score, member) pairs at once; `pairs` is a flat list. In runs of 4,000 values,
-- well within what Lua passes to one call. Returns how many members were new.
local function zadd_all(key, pairs)
  local added = 0
  for i = 1, #pairs, 4000 do
    added = added + redis.call('ZADD', key, unpack(pairs, i, math.min(i + 3999, #pairs)))
  end
  return added
end
-- ZMSCORE of many members at once, in runs of 4,000: their scores in order (strings; false for a
-- member not in the set).
local function zmscore_all(key, members)
  local out = {}
  for i = 1, #members, 4000 do
    local part = redis.call('ZMSCORE', key, unpack(members, i, math.min(i + 3999, #members)))
    for j = 1, #part do out[i + j - 1] = part[j] end
  end
  return out
end
-- Moves the sorted set `key` to Redis's skip-list encoding if it is in the compact one and holds
-- at least SKIPLIST_FROM members. Redis keeps a set of up to `zset-max-listpack-entries` members
-- (128 by default) as one listpack, in which every insert and every lookup scans the whole set:
-- the sets the fire path writes a task at a time (`claimed`, `ready`) cost far more
-- there than in a skip list (the figures: BENCHMARKS.md, "The fire path's Redis work, cut"). A member longer than
-- `zset-max-listpack-value` (64 bytes by default), added and removed at once, moves the set; Redis
-- does not move it back while it has members (a set that empties is deleted, and one loaded from
-- an RDB file is encoded by its size again: the next call moves it again). A smaller set is left
-- compact, where scanning it costs little, so that a quiet wheel whose sets empty and refill does
-- not move them at every call. One `OBJECT ENCODING` a call otherwise, and a `ZCARD` while
-- compact. (`NX`: a task under that very key is not touched.) Returns whether it moved the set.
local SKIPLIST_FROM = 32
local function keep_skiplist(key)
  local encoding = redis.call('OBJECT', 'ENCODING', key)
  if encoding ~= 'listpack' and encoding ~= 'ziplist' then return false end
  if redis.call('ZCARD', key) < SKIPLIST_FROM then return false end
  local long = '~timewheel: a member longer than zset-max-listpack-value~' .. string.rep('~', 200)
  if redis.call('ZADD', key, 'NX', 0, long) == 1 then redis.call('ZREM', key, long) end
  return true
end
