-- The history of finished runs: HISTORY, a list with one entry a run that ended (acknowledged,
-- dead, or cancelled while it ran), oldest first, each one string:
--   <ended ms>:<outcome>:<due ms>:<attempts>:<started ms>:<handler us>:<key length>:<key><error>
-- `ended ms` is Redis's clock when the script that ended it ran; `outcome` is `a` acknowledged,
-- `d` dead or `c` cancelled; `started ms` (on Redis's clock, as the worker's node estimates it)
-- and `handler us` (how long the handler ran) are empty when not known (it never started, or
-- its last lease ran out); the error, last, is a dead run's. The runs are numbered from 1 in the
-- order they were pushed: META's `history_seq` counts them and `history_dropped` the ones the
-- bounds took off the front, so run `n` is at index `n - history_dropped - 1`.
-- The worker packs each delivery's `<due ms>:<attempts>:<started ms>:<handler us>:<key length>:`
-- (its `run`), so that a script only joins strings; a delivery without one ('') is read from
-- its record.
-- `history_of(limit, age_ms)` is the bounds a call keeps (limit 0: no history); `add_history`
-- notes one run; `flush_history` pushes the call's runs in RPUSHes of up to 4,000, then drops from the
-- front what is beyond `limit` or ended more than `age_ms` ago (one LINDEX while nothing is that
-- old, a bisection of LINDEX when something is), in one LTRIM.
-- Keys: HISTORY, META.
-- @include keys
local function history_of(limit, age_ms)
  return { limit = tonumber(limit) or 0, age = tonumber(age_ms) or 0, runs = {}, n = 0 }
end
-- The outcomes as a run's text starts them.
local HISTORY_OUTCOMES = { a = 'a:', d = 'd:', c = 'c:', s = 's:' }
-- Notes the run of task `k` that ended with `outcome` ('a', 'd', 'c' or 's', snoozed): `run` as the worker
-- packed it, or '' (or nil) to read the due time and deliveries from `rec`, the task's record as
-- the delivery left it. Its text is joined at once, in one concatenation; the end time is
-- Redis's clock when the call noted its first run.
local function add_history(h, k, rec, outcome, run, err)
  if not h or h.limit <= 0 then return end
  if not run or run == '' then
    local due, a = string.match(rec, '^(%d+):(%d+):')
    run = due .. ':' .. a .. ':::' .. #k .. ':'
  end
  if not h.pre then
    local t = redis.call('TIME')
    h.now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    h.pre = string.format('%d:', h.now)
  end
  local n = h.n + 1
  if err then
    h.runs[n] = h.pre .. HISTORY_OUTCOMES[outcome] .. run .. k .. err
  else
    h.runs[n] = h.pre .. HISTORY_OUTCOMES[outcome] .. run .. k
  end
  h.n = n
end
local function flush_history(h)
  local values, count = h and h.runs, h and h.n or 0
  if not values or count == 0 then return end
  local now = h.now
  redis.call('HINCRBY', META, 'history_seq', count)
  local len = 0
  for i = 1, count, 4000 do len = redis.call('RPUSH', HISTORY, unpack(values, i, math.min(i + 3999, count))) end
  local drop = math.max(len - h.limit, 0)
  if h.age > 0 then
    local oldest = now - h.age
    local function ended(i) return tonumber(string.match(redis.call('LINDEX', HISTORY, i), '^(%d+):')) end
    if ended(drop) < oldest then
      -- The first run that ended since `oldest`: one exists, the ones just pushed.
      local lo, hi = drop, len - 1
      while lo < hi do
        local mid = math.floor((lo + hi) / 2)
        if ended(mid) < oldest then lo = mid + 1 else hi = mid end
      end
      drop = lo
    end
  end
  if drop > 0 then
    redis.call('LTRIM', HISTORY, drop, -1)
    redis.call('HINCRBY', META, 'history_dropped', drop)
  end
  h.runs, h.n = {}, 0
end
