-- ZADD of many (score, member) pairs at once; `pairs` is a flat list. In runs of 4,000 values,
-- well within what Lua passes to one call. Returns how many members were new.
local function zadd_all(key, pairs)
  local added = 0
  for i = 1, #pairs, 4000 do
    added = added + redis.call('ZADD', key, unpack(pairs, i, math.min(i + 3999, #pairs)))
  end
  return added
end
-- Moves the sorted set `key` to Redis's skip-list encoding if it is in the compact one. Redis
-- keeps a set of up to `zset-max-listpack-entries` members (128 by default) as one listpack, in
-- which every insert and every lookup scans the whole set: for the sets the fire path writes a
-- task at a time (`leased`, `claimed`, `ready`), about 130 members cost a claim and
-- acknowledgement some 55K instructions a task more than a skip list does (BENCHMARKS.md, "The
-- leases' encoding"). Redis never moves a set back while it has members, so a member longer than
-- `zset-max-listpack-value` (64 bytes by default), added and removed at once, moves it for as
-- long as it lives; a set that empties is deleted and starts compact again at its next add. One
-- `OBJECT ENCODING` a call otherwise. (`NX`: a task under that very key is not touched.)
local LONG_MEMBER = '~timewheel: a member longer than zset-max-listpack-value, to leave the compact encoding~'
  .. string.rep('~', 200)
-- Returns whether it moved the set.
local function keep_skiplist(key)
  local encoding = redis.call('OBJECT', 'ENCODING', key)
  if not encoding or encoding == 'skiplist' then return false end
  if redis.call('ZADD', key, 'NX', 0, LONG_MEMBER) == 1 then redis.call('ZREM', key, LONG_MEMBER) end
  return true
end
