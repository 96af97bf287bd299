-- Retry safety, per call rather than per task: a call that changes tasks names a request id
-- (CALL_KEY, the same for every retry of one call) and keeps its answer there for `ttl` ms. A
-- retry whose first attempt landed finds it and answers the same, changing nothing.
-- `replayed()` is the kept answer (a list of integers) or nil; `remember(out, ttl)` keeps it.
-- Keys: CALL_KEY.
local function replayed()
  local kept = redis.call('GET', CALL_KEY)
  if not kept then return nil end
  local out = {}
  for n in string.gmatch(kept, '-?%d+') do out[#out + 1] = tonumber(n) end
  return out
end
local function remember(out, ttl)
  redis.call('SET', CALL_KEY, table.concat(out, ','), 'PX', ttl)
end
