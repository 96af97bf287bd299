-- The history of finished runs: HISTORY, a list with one entry a run that ended (acknowledged,
-- dead, or cancelled while it ran), newest first, each one string:
--   <seq>:<ended ms>:<due ms>:<attempts>:<outcome>:<started ms>:<handler us>:<key length>:<key><error>
-- `seq` numbers a partition's runs (META's field `history_seq` counts them), so that a run's
-- place in the list is the head's seq minus its own; `ended ms` is Redis's clock when the script
-- that ended it ran; `outcome` is `a` acknowledged, `d` dead or `c` cancelled; `started ms` (on
-- Redis's clock, as the worker's node estimates it) and `handler us` (how long the handler ran)
-- are empty when not known (it never started, or its last lease ran out); the error, last, is
-- a dead run's. A list, not a stream: one LPUSH a call for all its runs costs Redis a fraction
-- of what an XADD a run cost (BENCHMARKS.md, "History: what it costs").
-- `history_of(limit, age_ms)` is the bounds a call keeps (limit 0: no history); `add_history`
-- notes one run; `flush_history` writes the call's runs in one LPUSH, keeps the newest `limit`
-- (LTRIM), and drops the runs that ended more than `age_ms` ago (one LLEN and LINDEX while
-- there are none; a bisection of LINDEX and an LTRIM when there are).
-- Keys: HISTORY, META.
-- @include keys
local function history_of(limit, age_ms)
  return { limit = tonumber(limit) or 0, age = tonumber(age_ms) or 0, runs = {} }
end
-- Notes the run of task `k` that ended with `outcome` ('a', 'd' or 'c'): `rec` is its record as
-- the delivery left it (record.lua's format: its due time and deliveries are read from its head).
local function add_history(h, k, rec, outcome, started, handler_us, err)
  if not h or h.limit <= 0 then return end
  local due, a = string.match(rec, '^(%d+):(%d+):')
  local runs = h.runs
  runs[#runs + 1] = { due, a, outcome, started or '', handler_us or '', k, err or '' }
end
local function flush_history(h)
  if not h or #h.runs == 0 then return end
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local n = #h.runs
  local last = redis.call('HINCRBY', META, 'history_seq', n)
  local values = {}
  for i, r in ipairs(h.runs) do
    values[i] = string.format('%d:%d:%s:%s:%s:%s:%s:%d:', last - n + i, now, r[1], r[2], r[3], r[4], r[5], #r[6])
      .. r[6] .. r[7]
  end
  for i = 1, n, 4000 do redis.call('LPUSH', HISTORY, unpack(values, i, math.min(i + 3999, n))) end
  redis.call('LTRIM', HISTORY, 0, h.limit - 1)
  if h.age > 0 then
    -- The runs that ended before `oldest` are at the tail: find the first of them by bisection
    -- (a few LINDEX) and cut the list before it.
    local oldest = now - h.age
    local function ended(i) return tonumber(string.match(redis.call('LINDEX', HISTORY, i), '^%d+:(%d+):')) end
    local len = redis.call('LLEN', HISTORY)
    if ended(len - 1) < oldest then
      local lo, hi = 0, len - 1
      while lo < hi do
        local mid = math.floor((lo + hi) / 2)
        if ended(mid) < oldest then hi = mid else lo = mid + 1 end
      end
      redis.call('LTRIM', HISTORY, 0, lo - 1)
    end
  end
  h.runs = {}
end
