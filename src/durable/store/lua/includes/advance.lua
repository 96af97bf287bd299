-- Moves recurring task `t` (decoded) on to its next run, after the run due at `t.due` ended
-- (acknowledged, or given up after its last attempt) at Redis's time `now`. Returns false when
-- the series is over (its last counted run ended, or its node-computed next run is none); else
-- `t` holds the next run: deliveries 0, no claim.
--
-- A series with a spec (record.lua: a cron expression, or a fixed rate with an end) is moved to
-- `next_due`, the time the node worked out from the spec on Redis's clock (its missed-run policy
-- and burst cap applied there): a string of ms, which must be after `t.due`; '' or '0' or a
-- time not after `t.due` ends the series. Given no `next_due` at all (nil: the tick, which has no
-- node's answer, gives up a run whose last attempt's lease ran out), the next run is due `now`,
-- and its own end puts the series back on its schedule.
--
-- A fixed-rate series (a period, no spec) is moved on here: due `t.due + every`; when that is
-- already past (runs were missed while nothing ran it), the run that just ended stood for them,
-- and the policy says what comes next: burst (0) keeps the fixed rate, so the missed runs follow
-- at once, but at most MAX_BURST of them (the earlier ones are skipped); delay (1) runs a period
-- after now; skip (2) runs at the first time of the original schedule after now. The rule is
-- Recurrence::next_run's, the one the node applies to every series; one table of cases runs
-- through both (src/durable/tests/advance.rs).
-- @include constants
local function advance(t, now, next_due)
  if t.runs == 1 then return false end
  local due
  if t.spec ~= '' then
    if next_due == nil then
      due = now
    else
      due = tonumber(next_due)
      if not due or due <= t.due then return false end
    end
  elseif t.every <= 0 then
    return false
  else
    due = t.due + t.every
    if due <= now then
      local behind = math.floor((now - t.due) / t.every)
      if t.missed == '1' then
        due = now + t.every
      elseif t.missed == '2' then
        due = t.due + t.every * (behind + 1)
      elseif behind > MAX_BURST then
        due = t.due + t.every * (behind - MAX_BURST + 1)
      end
    end
  end
  if t.runs > 1 then t.runs = t.runs - 1 end
  t.due, t.a, t.tok, t.err, t.burst = due, 0, '0', '', ''
  return true
end
