-- A pending task's record, the value under its key in TASKS, one string:
--   <due ms>:<deliveries>:<claim token>:<period ms>:<runs left>:<error length>:<error><payload>
-- The claim token is 0 while no worker holds the task; the period is 0 for a task that runs
-- once, else it is recurring and `runs left` counts what is left of its series (-1: forever). The
-- error is the last failure's (empty if none). The payload is last so that it is never parsed.
-- `decode` gives a table of those fields (strings, but `due` and `a` numbers); `encode` the string.
local function decode(rec)
  local due, a, tok, every, runs, n, at = string.match(rec, '^(%d+):(%d+):(%d+):(%d+):(%-?%d+):(%d+):()')
  n = tonumber(n)
  return {
    due = tonumber(due), a = tonumber(a), tok = tok, every = every, runs = runs,
    err = string.sub(rec, at, at + n - 1), p = string.sub(rec, at + n),
  }
end
local function encode(t)
  return string.format('%d:%d:%s:%s:%s:%d:', t.due, t.a, t.tok, t.every, t.runs, #t.err) .. t.err .. t.p
end
-- The claim token alone, without copying the payload.
local function token_of(rec)
  return string.match(rec, '^%d+:%d+:(%d+):')
end
-- A new task's record.
local function new_record(due, payload)
  return string.format('%d:0:0:0:0:0:', due) .. payload
end
