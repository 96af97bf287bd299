-- The wheel-wide figures of each minute, in FIGURES (a hash), counted by the scripts that do the
-- work, in the calls they make anyway: field '<minute>:<what>' (the minute of Redis's clock,
-- ms / 60000) for what = 'h' handed out, 'a' acknowledged, 'f' failed (retried or dead), 'd'
-- dead, 'l<b>' deliveries claimed late by [2^(b-1), 2^b) ms ('l0': under a millisecond). The
-- first count of a minute drops the minutes older than FIGURES_MINUTES (one HKEYS a minute at
-- most; 'from' records the oldest minute kept).
-- Keys: FIGURES.
-- @include keys
-- @include clock
local FIGURES_MINUTES = 120
-- The lateness bucket of `late_ms`: 0 under a millisecond, else 1 + floor(log2(ms)), at most 24.
local function late_bucket(late_ms)
  if late_ms < 1 then return 0 end
  -- late_ms = m * 2^e with m in [0.5, 1): e is 1 + floor(log2(late_ms)).
  local _, e = math.frexp(late_ms)
  return math.min(e, 24)
end
-- Adds `counts` (what -> n) to the minute of `now` (Redis's clock in ms; read when not given).
local function count_figures(counts, now)
  now = now or clock()
  local minute = math.floor(now / 60000)
  local started = false
  for what, n in pairs(counts) do
    if n > 0 and redis.call('HINCRBY', FIGURES, minute .. ':' .. what, n) == n then started = true end
  end
  if not started then return end
  local oldest = minute - FIGURES_MINUTES
  if tonumber(redis.call('HGET', FIGURES, 'from') or '0') >= oldest then return end
  local old = {}
  for _, f in ipairs(redis.call('HKEYS', FIGURES)) do
    local m = tonumber(string.match(f, '^(%d+):'))
    if m and m < oldest then old[#old + 1] = f end
  end
  for i = 1, #old, 1000 do redis.call('HDEL', FIGURES, unpack(old, i, math.min(i + 999, #old))) end
  redis.call('HSET', FIGURES, 'from', oldest)
end
