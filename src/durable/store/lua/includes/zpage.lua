-- A page of the sorted set `set` in its order (score, then member): the members after the cursor
-- (`from`, `after`) (every member of score `from` when `after` is ''), of scores up to
-- `until_score` (a number; math.huge for no bound), at most `limit`, as a flat list of member then
-- score (as Redis writes it). While the cursor's member is still in the set at that score, the
-- page starts from its rank (one ZRANK, whatever the ties at that score); otherwise it reads from
-- the score on, past the members at it up to `after`, `limit` at a time.
-- @include keys
local function zpage(set, from, after, until_score, limit)
  local out = {}
  if limit <= 0 then return out end
  if after ~= '' then
    local s = redis.call('ZSCORE', set, after)
    if s and tonumber(s) == from then
      local rank = redis.call('ZRANK', set, after)
      local r = redis.call('ZRANGE', set, rank + 1, rank + limit, 'WITHSCORES')
      for i = 1, #r, 2 do
        if tonumber(r[i + 1]) > until_score then break end
        out[#out + 1] = r[i]
        out[#out + 1] = r[i + 1]
      end
      return out
    end
  end
  local offset = 0
  while true do
    local r = redis.call('ZRANGEBYSCORE', set, from, until_score, 'WITHSCORES', 'LIMIT', offset, limit)
    for i = 1, #r, 2 do
      if after == '' or tonumber(r[i + 1]) > from or r[i] > after then
        out[#out + 1] = r[i]
        out[#out + 1] = r[i + 1]
        if #out >= 2 * limit then return out end
      end
    end
    if #r < 2 * limit then return out end
    offset = offset + limit
  end
end
