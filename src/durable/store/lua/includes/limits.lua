-- Limits by key prefix (`DurableScheduler::set_limit`), which every claim of every node obeys.
-- LIMITS is one hash:
--   <prefix>            -> '<rate>/<window ms>/<running>' (0 for a part the limit does not have)
--   '\0' .. <prefix>    -> when the running limit last gained room: an outcome freed it (ms)
--   '\1' .. <prefix> .. '\0' .. <key> -> '' while that task runs under the running limit
--   '\2' .. <prefix>    -> the rate limit's next free start (ms, with a fraction)
--   '\3'                -> '1' while a limit may hold tasks back (set by the claim that holds
--                          one, cleared by `unhold` when it finds none), so that a call looks
--                          for held tasks only then
-- The hash is read once a call (`raw_limits`, again after a write here).
--
-- A rate limit of `rate` starts per `window` spaces its starts evenly, one every window / rate
-- (and 2 %: SPACING_MARGIN) on a virtual schedule, as GCRA keeps it: a start takes the next free one, at or after now, and
-- so no window of the rate's length ever holds more than `rate` starts, whatever nodes claim.
-- A claim hands out the starts of the next HORIZON at once, each with its start time: the
-- worker holds the task until then (its handler starts on the dot, not when the claim came).
-- A running limit counts a task from its claim while its lease lives (LEASED's score), so a node
-- that died holds its room until its lease runs out, no longer.
--
-- A task under no limit pays nothing here but a HGETALL a call (of an empty hash, without
-- limits), and with limits set one plain `string.find` a limit. A task a limit holds back stays in READY, scored HOLD above its
-- due time, so that every claim passes over it at no cost (it sorts after every task not held)
-- and `cancel`, `reschedule` and the listings find it where they look; a claim (and the tick)
-- puts it back at its due time once its limits have room (`unhold`), in due order.
-- @include keys
-- @include zadd_all
-- @include wake
-- @include claims
local HOLD = 1125899906842624 -- 2^50 ms: above every due time (the year 2286 is ~1e13 ms)
-- A rate limit's starts are spaced 2 % wider than window / rate: a handler starts a little after
-- its start time (its worker's wake-up), by a few ms that vary, and the margin keeps the starts
-- as the handlers' own clocks see them within the rate too (20 a second: 51 ms apart, so a
-- second holds 20 starts with 20 ms to spare).
local SPACING_MARGIN = 1.02

-- LIMITS as HGETALL answers it, read once a call and again after a write (`limits_changed`).
local limits_raw, limits_parsed = nil, nil
local function raw_limits()
  if not limits_raw then limits_raw = redis.call('HGETALL', LIMITS) end
  return limits_raw
end
local function limits_changed()
  limits_raw, limits_parsed = nil, nil
end

-- Whether a limit may hold tasks back (the '\3' field).
local function maybe_held()
  local all = raw_limits()
  for i = 1, #all, 2 do
    if all[i] == '\3' then return true end
  end
  return false
end

-- The limits set, as a list of tables {p, rate, window, running, every (ms between starts),
-- slot (the next free start), freed, held (the running keys)}, or nil when none is: fresh
-- tables, which the caller may change (`limits_of` keeps one parse a call for the rest).
local function parse_limits()
  local all = raw_limits()
  if #all == 0 then return nil end
  local list, by_prefix, notes = {}, {}, {}
  for i = 1, #all, 2 do
    local f, v = all[i], all[i + 1]
    local kind = string.byte(f, 1)
    if kind <= 3 then
      notes[#notes + 1] = f
      notes[#notes + 1] = v
    else
      local rate, window, running = string.match(v, '^(%d+)/(%d+)/(%d+)$')
      if rate then
        local l = {
          p = f, rate = tonumber(rate), window = tonumber(window), running = tonumber(running),
          slot = 0, freed = 0, held = {},
        }
        if l.rate > 0 then l.every = l.window / l.rate * SPACING_MARGIN end
        list[#list + 1] = l
        by_prefix[f] = l
      end
    end
  end
  for i = 1, #notes, 2 do
    local f, v = notes[i], notes[i + 1]
    local kind = string.byte(f, 1)
    if kind == 1 then
      local p, k = string.match(f, '^\1(.-)%z(.*)$')
      local l = p and by_prefix[p]
      if l then l.held[#l.held + 1] = k end
    elseif kind ~= 3 then
      local l = by_prefix[string.sub(f, 2)]
      if l and kind == 0 then l.freed = tonumber(v) or 0 end
      if l and kind == 2 then l.slot = tonumber(v) or 0 end
    end
  end
  if #list == 0 then return nil end
  return list
end

-- Whether key `k` starts with `p` (a plain find: no substring made).
local function starts_with(k, p)
  return string.find(k, p, 1, true) == 1
end

-- `parse_limits`, parsed once a call (and again after a write): the claim's, which changes its
-- room as it takes tasks, and every reader's after it.
local function limits_of()
  if limits_parsed == nil then limits_parsed = parse_limits() or false end
  return limits_parsed or nil
end

-- The limits over key `k` (nil for none).
local function limits_over(list, k)
  local out
  for _, l in ipairs(list) do
    if starts_with(k, l.p) then
      out = out or {}
      out[#out + 1] = l
    end
  end
  return out
end

-- Room left under the running limit `l` at `now`: worked out at its first use in a call, then
-- kept up to date by `take_room`. Running tasks whose lease ran out leave the limit here.
local function running_room(l, now)
  if l.left then return l.left end
  local live = 0
  for _, k in ipairs(l.held) do
    if lease_end(redis.call('ZSCORE', CLAIMED, k) or '0') > now then
      live = live + 1
    else
      redis.call('HDEL', LIMITS, '\1' .. l.p .. '\0' .. k)
      limits_changed()
    end
  end
  l.left = l.running - live
  return l.left
end

-- Whether task `k` may start within `horizon` ms of `now` under `list`; if so it takes its room
-- (in this call's tables: `save_limits` writes them, `note_start` its running entry). Returns
-- that, the limits over `k` (nil for none), when it starts (ms; `now` unless a rate limit
-- spaces it later) and when its limits let it start at the earliest (for its lateness).
local function take_room(list, k, now, horizon)
  local over = limits_over(list, k)
  if not over then return true, nil, now, 0 end
  local start, allowed = now, 0
  for _, l in ipairs(over) do
    if l.running > 0 then
      if running_room(l, now) <= 0 then return false, over end
      if l.freed > allowed then allowed = l.freed end
    end
    if l.rate > 0 then
      if l.slot > now + horizon then return false, over end
      if l.slot > start then start = l.slot end
      if l.slot > allowed then allowed = l.slot end
    end
  end
  for _, l in ipairs(over) do
    if l.running > 0 then l.left = l.left - 1 end
    if l.rate > 0 then
      l.slot = start + l.every
      l.dirty = true
    end
  end
  return true, over, start, allowed
end

-- Writes the running entry of task `k`, started under the limits `over`.
local function note_start(over, k)
  for _, l in ipairs(over) do
    if l.running > 0 then
      redis.call('HSET', LIMITS, '\1' .. l.p .. '\0' .. k, '')
      limits_changed()
    end
  end
end

-- Writes the rate limits' next free starts that this call moved, and notes that tasks are held
-- if this call held any.
local function save_limits(list, held)
  for _, l in ipairs(list) do
    if l.dirty then redis.call('HSET', LIMITS, '\2' .. l.p, string.format('%.3f', l.slot)) end
  end
  if held then redis.call('HSET', LIMITS, '\3', '1') end
  limits_changed()
end

-- Whether a limit holds tasks back.
local function any_held()
  return maybe_held() and #redis.call('ZRANGEBYSCORE', READY, HOLD, '+inf', 'LIMIT', 0, 1) > 0
end

-- When a claim should come again for a task a rate limit holds back (ms), if one is held: when
-- the earliest next free start among the rate limits comes within `horizon`. '' otherwise (a
-- running limit's room comes with an outcome, which wakes a worker: `release_limits`).
local function next_room(list, now, horizon)
  local at
  for _, l in ipairs(list) do
    if l.rate > 0 and l.slot > now + horizon and (not at or l.slot - horizon < at) then at = l.slot - horizon end
  end
  if not at or not any_held() then return '' end
  return string.format('%d', math.ceil(at))
end

-- The tasks `names` no longer run: they leave the running limits over them (noting when), and
-- an idle worker is woken if that gives room to a task held back.
local function release_limits(names)
  if #names == 0 then return end
  local list = limits_of()
  if not list then return end
  local released, at = 0, nil
  for _, l in ipairs(list) do
    -- Only a limit with tasks running under it has any to release.
    if l.running > 0 and #l.held > 0 then
      local freed = 0
      for _, k in ipairs(names) do
        if starts_with(k, l.p) then
          freed = freed + redis.call('HDEL', LIMITS, '\1' .. l.p .. '\0' .. k)
        end
      end
      if freed > 0 then
        limits_changed()
        if not at then
          local t = redis.call('TIME')
          at = string.format('%d', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
        end
        redis.call('HSET', LIMITS, '\0' .. l.p, at)
        limits_changed()
        released = released + freed
      end
    end
  end
  if released > 0 and any_held() then wake() end
end

-- Whether some limit of `list` has room within `horizon` of `now` (counted in `list`'s tables).
local function any_room(list, now, horizon)
  for _, l in ipairs(list) do
    local room = not (l.running > 0 and running_room(l, now) <= 0)
    if room and l.rate > 0 and l.slot > now + horizon then room = false end
    if room then return true end
  end
  return false
end

-- Puts back at their due time, oldest due first, the held tasks that their limits have room for
-- within `horizon` of `now` (counted in a fresh parse of the limits: the claim that takes them
-- counts again), reading the held tasks `page` at a time while some limit has room, and none
-- while no limit has any. Returns how many it put back, and whether tasks are still held.
local function unhold(now, page, horizon)
  if not maybe_held() then return 0, false end
  local list = parse_limits()
  local put, skipped = 0, 0
  while not list or any_room(list, now, horizon) do
    local held = redis.call('ZRANGEBYSCORE', READY, HOLD, '+inf', 'WITHSCORES', 'LIMIT', skipped, page)
    local back, n = {}, 0
    for i = 1, #held, 2 do
      local k = held[i]
      if not list or take_room(list, k, now, horizon) then
        back[n + 1], back[n + 2] = string.format('%d', tonumber(held[i + 1]) - HOLD), k
        n = n + 2
      end
    end
    zadd_all(READY, back)
    put, skipped = put + n / 2, skipped + (#held - n) / 2
    if #held < 2 * page then break end
  end
  if put == 0 and skipped == 0 and not any_held() then
    redis.call('HDEL', LIMITS, '\3')
    limits_changed()
    return 0, false
  end
  return put, true
end
