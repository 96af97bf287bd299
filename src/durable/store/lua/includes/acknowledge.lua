-- Acknowledges the deliveries listed in `list` from index `from` on (ACK_FIELDS entries per
-- delivery: key, claim token, next due, its run for the history): each task is done and its key free again, or, for a recurring task with runs to
-- come, moved on to its next run (see advance.lua: `next due` is the node's answer for a series
-- with a spec, '' for any other task), placed in the far tier or `ready` (no ring slot is
-- declared for it; the tick promotes it into the ring). An upsert queued behind the run (see
-- queued.lua) takes the place of the series' next run instead. A delivery whose claim token is
-- not the task's current one is refused and changes nothing, and so is a key given twice (the
-- records were read before any change). Returns one digit per delivery, as one string: 1
-- acknowledged, 0 refused. Each acknowledged run goes in the history `h` (see history.lua), and
-- its claim leaves the claim index, and its call's lease once no task of the call is left
-- (claims.lua).
-- Keys: TASKS, LEASED, META, FIGURES, UPSERTS, HISTORY, CLAIMED, CLAIMS, and for a recurring task FAR, READY,
-- CURSOR, WAKE.
-- @include keys
-- @include wheel_now
-- @include record
-- @include advance
-- @include place
-- @include zrem_all
-- @include hash_all
-- @include wake
-- @include figures
-- @include queued
-- @include constants
-- @include history
-- @include claims
-- @include limits
local function acknowledge(list, from, tick_ms, slots, h)
  local out, acked, toks, done, w, batch, seen, replaced = {}, {}, {}, {}, nil, new_batch(), {}, {}
  local n_acked, n_done = 0, 0
  local names, recs = records_of(list, from, ACK_FIELDS)
  local queued = queued_of(names)
  for j, k in ipairs(names) do
    local at = from + ACK_FIELDS * (j - 1)
    local rec, tok, next_due = recs[j], list[at + 1], list[at + 2]
    local _, current, every
    if rec then _, current, every = head_of(rec) end
    if rec and current == tok and not seen[k] then
      seen[k] = true
      n_acked = n_acked + 1
      acked[n_acked], toks[n_acked] = k, tok
      add_history(h, k, rec, 'a', list[at + 3])
      local q = queued[j]
      local t = not q and (every ~= '0' or next_due ~= '') and decode(rec)
      w = w or ((q or t) and wheel_now(tick_ms, slots, #KEYS + 1, nil))
      if q then
        redis.call('HSET', TASKS, k, q)
        place(k, tonumber(record_due(q)), w, batch)
        replaced[#replaced + 1] = k
      elseif t and advance(t, w.down, next_due) then
        redis.call('HSET', TASKS, k, encode(t))
        place(k, t.due, w, batch)
      else
        n_done = n_done + 1
        done[n_done] = k
      end
      out[j] = '1'
    else
      out[j] = '0'
    end
  end
  if n_acked > 0 then
    forget_claims(acked, toks)
    release_limits(acked)
    if n_done > 0 then zrem_all(TASKS, done, 'HDEL') end
    drop_queued(replaced)
    if flush(batch) then wake() end
    redis.call('HINCRBY', META, 'acked', n_acked)
    count_figures({ a = n_acked })
  end
  return table.concat(out)
end
