--[[ Cancels a batch of tasks by key, if they are waiting or ready. A task a worker holds under a
  live lease is running (its handler has started, or its claim's reply is on its way and will
  start it) and is left alone: its lease runs its course. A task whose lease ran out (its worker
  died or outran it) is no longer running and is cancelled, so that no other delivery starts.
  So when this answers 1, no handler of the task starts after it, on any node. An upsert queued
  behind a running run (see includes/queued.lua) is dropped whatever the answer, so that the run
  ends its series as it would have without the upsert.

  Safe to retry: the answer is kept under the call's id (CALL_KEY) for `ttl` ms; a retry whose
  first attempt landed answers the same and leaves alone a task scheduled under the key since.

  Input:
    KEYS     the wheel's keys, then CALL_KEY
    ARGV[1]  ms to keep the answer   ARGV[2 ..] keys
  Output:
    one digit per key: 1 cancelled (by this call), 0 none pending, 2 running (left alone).
  Keys: CALL_KEY, TASKS, FAR, READY, LEASED, UPSERTS, CLAIMED, META. A cancelled task's ring entry is left in its
  slot (its key is not known here, and need not be): the cursor drops it when it passes it,
  since no record matches it any more (see tick.lua).
]]
-- @include keys
-- @include clock
-- @include record
-- @include request
-- @include zrem_all
-- @include hash_all
-- @include queued
-- @include claims
local ttl = ARGV[1]
-- The keys to cancel, from ARGV[KEYS_FROM] on.
local KEYS_FROM = 2

local kept = replayed()
if kept then return kept end
local out, seen, gone, held, toks = {}, {}, {}, {}, {}
local now
local names, recs = records_of(ARGV, KEYS_FROM, 1)
for j, k in ipairs(names) do
  local rec = not seen[k] and recs[j]
  seen[k] = true
  if not rec then
    -- None pending, or the same key again in this call (the first of them cancelled it).
    out[#out + 1] = '0'
  else
    local tok = token_of(rec)
    local running, claimed = false, tok ~= '0'
    if claimed then
      now = now or clock()
      running = lease_end(tok) > now
    end
    if running then
      out[#out + 1] = '2'
    else
      gone[#gone + 1] = k
      -- Only a claimed task has a claim to forget.
      if claimed then held[#held + 1], toks[#held + 1] = k, tok end
      out[#out + 1] = '1'
    end
  end
end
drop_queued(names)
if #gone > 0 then
  zrem_all(TASKS, gone, 'HDEL')
  zrem_all(FAR, gone)
  zrem_all(READY, gone)
  forget_claims(held, toks)
  redis.call('HINCRBY', META, 'cancelled', #gone)
end
return remember(table.concat(out), ttl)
