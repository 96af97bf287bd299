-- The history of finished runs: HISTORY, a stream with one entry a run that ended (acknowledged,
-- dead, or cancelled while it ran), whose id is when it finished (Redis's clock). Its fields:
--   key, due (ms), attempts (deliveries, this one included), outcome ('acknowledged', 'dead' or
--   'cancelled'), started (ms on Redis's clock, as the worker's node estimates it, when the
--   handler started; '' when not known: it never started, or a lease ran out), handler_us (how
--   long the handler ran, in microseconds; '' when not known), and for a dead run error.
-- `history_of(limit, age_ms)` is the bounds a call keeps (limit 0: no history); `add_history`
-- appends one run, trimming the stream to about `limit` entries (whole nodes of it, as
-- `MAXLEN ~` does); `trim_history` drops, once a call, the entries older than `age_ms` before
-- the last one added (about: whole nodes of it, as `MINID ~` does).
-- Keys: HISTORY.
-- @include keys
local function history_of(limit, age_ms)
  return { limit = tonumber(limit) or 0, age = tonumber(age_ms) or 0 }
end
-- Appends the run of task `k` that ended with `outcome`: `rec` is its record as the delivery
-- left it (record.lua's format: its due time and deliveries are read from its head).
local function add_history(h, k, rec, outcome, started, handler_us, err)
  if not h or h.limit <= 0 then return end
  local due, a = string.match(rec, '^(%d+):(%d+):')
  if err then
    h.last = redis.call('XADD', HISTORY, 'MAXLEN', '~', h.limit, '*', 'key', k, 'due', due, 'attempts', a,
      'outcome', outcome, 'started', started or '', 'handler_us', handler_us or '', 'error', err)
  else
    h.last = redis.call('XADD', HISTORY, 'MAXLEN', '~', h.limit, '*', 'key', k, 'due', due, 'attempts', a,
      'outcome', outcome, 'started', started or '', 'handler_us', handler_us or '')
  end
end
local function trim_history(h)
  if not h or not h.last or h.age <= 0 then return end
  local ms = tonumber(string.match(h.last, '^(%d+)'))
  redis.call('XTRIM', HISTORY, 'MINID', '~', string.format('%d', ms - h.age))
end
