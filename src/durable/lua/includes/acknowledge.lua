-- Acknowledges the deliveries listed in `list` from index `from` on (key, then claim token, per
-- delivery): each task is done and its key free again, or, for a recurring task with runs to
-- come, moved on to its next run (see advance.lua), placed in the far tier or `ready` (no ring
-- slot is declared for it; the tick promotes it into the ring). A delivery whose claim token is
-- not the task's current one is refused and changes nothing, and so is a key given twice (the
-- records were read before any change). Returns one digit per delivery, as one string: 1
-- acknowledged, 0 refused.
-- Keys: TASKS, LEASED, META, FIGURES, and for a recurring task FAR, READY, CURSOR, WAKE.
-- @include keys
-- @include wheel_now
-- @include record
-- @include advance
-- @include place
-- @include zrem_all
-- @include hash_all
-- @include wake
-- @include figures
local function acknowledge(list, from, tick_ms, slots)
  local out, acked, done, w, batch, seen = {}, {}, {}, nil, new_batch(), {}
  local names, recs = records_of(list, from, 2)
  for j, k in ipairs(names) do
    local rec, tok = recs[j], list[from + 2 * j - 1]
    local _, current, every
    if rec then _, current, every = head_of(rec) end
    if rec and current == tok and not seen[k] then
      seen[k] = true
      acked[#acked + 1] = k
      local t = every ~= '0' and decode(rec)
      w = w or (t and wheel_now(tick_ms, slots, #KEYS + 1, nil))
      if t and advance(t, w.down) then
        redis.call('HSET', TASKS, k, encode(t))
        place(k, t.due, w, batch)
      else
        done[#done + 1] = k
      end
      out[j] = '1'
    else
      out[j] = '0'
    end
  end
  if #acked > 0 then
    zrem_all(LEASED, acked)
    if #done > 0 then zrem_all(TASKS, done, 'HDEL') end
    if flush(batch) then wake() end
    redis.call('HINCRBY', META, 'acked', #acked)
    count_figures({ a = #acked })
  end
  return table.concat(out)
end
