-- The upserts queued behind a running run (see upsert.lua), in UPSERTS: a task's key -> the
-- record of the iteration that replaces its series when the run ends (record.lua's format: no
-- delivery, no claim, due when the upsert placed it). Whatever ends a run (acknowledge.lua,
-- fail.lua, the tick when a lease ran out) puts the queued record in place of what would have
-- come next; whatever makes a new task under a key, or cancels it, drops one left there.
-- `queued_of(names)` gives the queued records of keys `names` (false where none), with no
-- command beyond one HLEN while nothing is queued; `drop_queued(names)` forgets those of `names`;
-- `record_due(rec)` is a record's due time (a string, as written).
-- Keys: UPSERTS.
-- @include keys
-- @include hash_all
-- @include zrem_all
local function queued_of(names)
  if #names == 0 or redis.call('HLEN', UPSERTS) == 0 then return {} end
  return hmget_all(UPSERTS, names)
end
local function drop_queued(names)
  if #names > 0 and redis.call('HLEN', UPSERTS) > 0 then zrem_all(UPSERTS, names, 'HDEL') end
end
local function record_due(rec)
  return string.match(rec, '^(%d+):')
end
