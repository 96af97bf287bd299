-- Moves recurring task `t` (decoded) on to its next run, after the run due at `t.due` ended
-- (acknowledged, or given up after its last attempt) at Redis's time `now`: fixed rate, due
-- `t.due + every`; when that is already past (runs were missed while nothing ran it), the run
-- that just ended stood for them, and the policy says what comes next: burst (0) keeps the fixed
-- rate, so the missed runs follow at once; delay (1) runs a period after now; skip (2) runs at
-- the first time of the original schedule after now. Returns false when the series is over
-- (its last counted run ended); else `t` holds the next run: deliveries 0, no claim.
local function advance(t, now)
  if t.every <= 0 or t.runs == 1 then return false end
  if t.runs > 1 then t.runs = t.runs - 1 end
  local next_due = t.due + t.every
  if next_due <= now then
    if t.missed == '1' then
      next_due = now + t.every
    elseif t.missed == '2' then
      next_due = t.due + t.every * (math.floor((now - t.due) / t.every) + 1)
    end
  end
  t.due, t.a, t.tok, t.err = next_due, 0, '0', ''
  return true
end
