-- A pending task's record, the value under its key in TASKS, one string (docs/DESIGN.md's table
-- of the stored formats lists every text the wheel keeps, and the code that writes and reads each):
--   <due ms>:<deliveries>:<claim token>:<period ms>:<runs left>:<missed runs>:<optional fields><error length>:<error><payload>
-- where each optional field is `<tag letter><length>:<value>` (c the spec, t the trace, r the
-- retry settings; read by `optional_fields`, which skips and keeps a tag it does not know).
-- The claim token is 0 while no worker holds the task, and a task is in CLAIMED exactly while its
-- token is not 0 (every script that sets it to 0 forgets the claim in the same call: claims.lua). A
-- task is recurring when its period is not 0 or it has a spec: `runs left` counts the runs of
-- its series still to come, this one included (-1: forever), and `missed runs` is its policy (0
-- burst, 1 delay, 2 skip). A fixed-rate series (a period, no spec) is moved on in Lua (see
-- advance.lua). A series whose next run Lua cannot work out (a cron expression in a time zone,
-- or a fixed rate with an end) has a spec instead, the optional field in brackets, and a period
-- of 0: the node reads it and hands the next due time to the script that ends the run (see
-- acknowledge.lua). The spec is text: `<end ms, 0 for none> every <period ms>` or
-- `<end ms> cron <zone> <expression>`, length-prefixed so that it may hold any character. A
-- record without it (every record written before it existed) reads as before. The trace, the
-- second optional field, is the W3C trace context of the span that scheduled the task, as text
-- the node wrote and reads (with the `opentelemetry` feature; without it no record has one), kept
-- as it is by every script that rewrites the record, so each run of a series links to it. The
-- retry, the third, is the task's own retry settings (`TaskOptions`), `<max attempts>/<backoff
-- ms>` with either number left out for the node's own (see `retry_limits`); a task without it
-- follows the node's, and it is kept as it is by every script that rewrites the record. The
-- error is the last failure's (empty if none). The payload is last so that it is never parsed.
-- The burst, the fourth (`b`), is a debounced task's latest due time (debounce.lua). `decode`
-- gives a table of those fields (strings, but `due` and `a` numbers; `spec`, `trace`, `retry` and
-- `burst` are '' when absent); `encode` the string.
-- The optional fields of a record from `at` on, read by one loop: each is `<tag><length>:<value>`,
-- the tag a letter (c the spec, t the trace, r the retry settings), in any order; the error's
-- length, a digit, ends them. A tag this version does not know is kept whole in `extra` (written
-- back as it was by `encode`), so that a record written by a later version reads here and keeps
-- what it had. Returns the fields by tag, `extra`, and where the error's length starts.
local function optional_fields(rec, at)
  local known, extra = {c = '', t = '', r = '', b = ''}, ''
  while true do
    local tag, len, from = string.match(rec, '^(%a)(%d+):()', at)
    if not tag then return known, extra, at end
    local value = string.sub(rec, from, from + len - 1)
    if known[tag] then known[tag] = value else extra = extra .. tag .. len .. ':' .. value end
    at = from + len
  end
end
local function decode(rec)
  local due, a, tok, every, runs, missed, at = string.match(rec, '^(%d+):(%d+):(%d+):(%d+):(%-?%d+):(%d):()')
  local f, extra
  f, extra, at = optional_fields(rec, at)
  local n, e = string.match(rec, '^(%d+):()', at)
  n = tonumber(n)
  return {
    due = tonumber(due), a = tonumber(a), tok = tok, every = tonumber(every), runs = tonumber(runs),
    missed = missed, spec = f.c, trace = f.t, retry = f.r, burst = f.b, extra = extra, err = string.sub(rec, e, e + n - 1),
    p = string.sub(rec, e + n),
  }
end
-- The spec field of a record: empty without a spec.
local function spec_field(spec)
  if spec == nil or spec == '' then return '' end
  return 'c' .. #spec .. ':' .. spec
end
-- The trace field of a record: empty without a trace.
local function trace_field(trace)
  if trace == nil or trace == '' then return '' end
  return 't' .. #trace .. ':' .. trace
end
-- The retry field of a record: empty without the task's own retry settings.
local function retry_field(retry)
  if retry == nil or retry == '' then return '' end
  return 'r' .. #retry .. ':' .. retry
end
-- The burst field of a record: the time (ms) by which a debounced task's burst runs at the latest
-- (`DurableScheduler::debounce`'s `max_wait` after the burst's first call); empty for any other.
local function burst_field(burst)
  if burst == nil or burst == '' then return '' end
  return 'b' .. #burst .. ':' .. burst
end
-- The max attempts and backoff base (ms) of a task whose record has the retry field `retry`
-- (decode's): the task's own where it has them, else `max_attempts` and `backoff_ms`, the node's.
local function retry_limits(retry, max_attempts, backoff_ms)
  if retry == '' then return max_attempts, backoff_ms end
  local own_max, own_backoff = string.match(retry, '^(%d*)/(%d*)$')
  return tonumber(own_max) or max_attempts, tonumber(own_backoff) or backoff_ms
end
local function encode(t)
  return string.format('%d:%d:%s:%d:%d:%s:', t.due, t.a, t.tok, t.every, t.runs, t.missed) .. spec_field(t.spec)
    .. trace_field(t.trace) .. retry_field(t.retry) .. burst_field(t.burst) .. (t.extra or '') .. #t.err .. ':' .. t.err .. t.p
end
-- The claim token alone, without copying the payload.
local function token_of(rec)
  return string.match(rec, '^%d+:%d+:(%d+):')
end
-- What follows the due time in the record of a new task (no delivery, no claim, no error)
-- before its payload: one that runs once, or (with `every` > 0 or a `spec`) a recurring one,
-- with the `trace` of the span that scheduled it and its own `retry` settings, if any. A call
-- that writes many new records of one kind with neither makes it once.
local function new_tail(every, runs, missed, spec, trace, retry)
  return string.format(':0:0:%d:%d:%s:', every or 0, runs or 0, missed or '0') .. spec_field(spec)
    .. trace_field(trace) .. retry_field(retry) .. '0:'
end
-- A new task's record: `due` (a number, or its text as written) then `new_tail`'s, then the payload.
local function new_record(due, payload, every, runs, missed, spec, trace, retry)
  return (type(due) == 'string' and due or string.format('%d', due))
    .. new_tail(every, runs, missed, spec, trace, retry) .. payload
end
-- The due time (as written: a string, to pass on as a score unformatted), claim token and
-- period alone, without copying the payload.
local function head_of(rec)
  return string.match(rec, '^(%d+):%d+:(%d+):(%d+):')
end
-- The record `rec` as claimed: one more delivery, claim token `tok` (a string), the rest (from
-- the period on, payload included) copied unparsed.
-- Also answers the due time as written (a string: arithmetic reads it once, where tonumber
-- reads it twice). Joined rather than formatted: string.format goes through sprintf once a
-- conversion.
local function claimed_record(rec, tok)
  local due, a, tail = string.match(rec, '^(%d+):(%d+):%d+:()')
  local next_a = a == '0' and '1' or string.format('%d', a + 1)
  return due .. ':' .. next_a .. ':' .. tok .. ':' .. string.sub(rec, tail), due
end
-- The record `rec` under claim token `tok` (a string), its deliveries unchanged: a delivery
-- given back moves to a claim call of its own and keeps its count (renew.lua).
local function with_token(rec, tok)
  local head, tail = string.match(rec, '^(%d+:%d+:)%d+:()')
  return head .. tok .. ':' .. string.sub(rec, tail)
end
-- A dead letter's record, the value under its key in DEAD_TASKS, one string:
--   <due ms>:<deliveries>:[r<retry length>:<retry>]<error length>:<error><payload>
-- (the live record's due time, deliveries, own retry settings if any, last error and payload:
-- a requeued task keeps its retry settings). `decode_dead` gives a table of those fields (`due`
-- and `a` as written, strings; `retry` '' when absent); `encode_dead` the string of a live
-- record's table `t` with the error `err`. A dead record written before the retry field reads
-- as before.
local function decode_dead(rec)
  local due, a, at = string.match(rec, '^(%d+):(%d+):()')
  local f, extra
  f, extra, at = optional_fields(rec, at)
  local n, e = string.match(rec, '^(%d+):()', at)
  n = tonumber(n)
  return {
    due = due, a = a, retry = f.r, extra = extra, err = string.sub(rec, e, e + n - 1), p = string.sub(rec, e + n),
  }
end
local function encode_dead(t, err)
  return string.format('%d:%d:', t.due, t.a) .. retry_field(t.retry) .. (t.extra or '') .. #err .. ':' .. err .. t.p
end
