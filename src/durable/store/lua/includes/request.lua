-- Retry safety, per call rather than per task: a call that changes tasks names a request id
-- (CALL_KEY, the same for every retry of one call) and keeps its answer there for `ttl` ms. A
-- retry whose first attempt landed finds it and answers the same, changing nothing.
-- An answer is one string (a batch call's is one digit per task), kept and returned as it is:
-- a table of numbers would cost Redis a number formatted per task to keep it.
-- `replayed()` is the kept answer or nil; `remember(answer, ttl)` keeps it and returns it.
-- Keys: CALL_KEY.
local function replayed()
  return redis.call('GET', CALL_KEY) or nil
end
local function remember(answer, ttl)
  redis.call('SET', CALL_KEY, answer, 'PX', ttl)
  return answer
end
