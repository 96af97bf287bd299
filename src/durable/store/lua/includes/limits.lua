-- Limits by key prefix (`DurableScheduler::set_limit`), which every claim of every node obeys.
-- LIMITS is one hash:
--   <prefix>            -> '<rate>/<window ms>/<running>' (0 for a part the limit does not have)
--   '\0' .. <prefix>    -> when a claim or a tick last found the limit without room (ms)
--   '\1' .. <prefix> .. '\0' .. <key> -> '' while that task runs under the running limit
-- LIMIT_STARTS is the sorted set of the starts under rate limits: '<prefix>\0<claim token>',
-- scored by the start's time (ms), trimmed to the longest window.
--
-- A task under no limit pays nothing here but a per-call HLEN and, with limits set, one
-- `string.sub` compare a limit. A task that a limit holds back stays in READY, scored HOLD above
-- its due time, so that every claim passes over it at no cost (it sorts after every task not
-- held) and `cancel`, `reschedule` and the listings find it where they look; the tick puts it
-- back at its due time once its limits have room (`unhold`), in due order.
-- A running task counts while its lease lives (LEASED's score), so a node that died holds its
-- room until its lease runs out, no longer.
-- @include keys
-- @include zadd_all
local HOLD = 1125899906842624 -- 2^50 ms: above every due time (the year 2286 is ~1e13 ms)

-- The limits set, as a list of tables {p, rate, window, running, full, held (the running keys)},
-- or nil when none is.
local function limits_of()
  if redis.call('HLEN', LIMITS) == 0 then return nil end
  local all = redis.call('HGETALL', LIMITS)
  local list, by_prefix, notes = {}, {}, {}
  for i = 1, #all, 2 do
    local f, v = all[i], all[i + 1]
    local kind = string.byte(f, 1)
    if kind == 0 or kind == 1 then
      notes[#notes + 1] = f
      notes[#notes + 1] = v
    else
      local rate, window, running = string.match(v, '^(%d+)/(%d+)/(%d+)$')
      if rate then
        local l = { p = f, rate = tonumber(rate), window = tonumber(window), running = tonumber(running), full = 0, held = {} }
        list[#list + 1] = l
        by_prefix[f] = l
      end
    end
  end
  for i = 1, #notes, 2 do
    local f = notes[i]
    if string.byte(f, 1) == 0 then
      local l = by_prefix[string.sub(f, 2)]
      if l then l.full = tonumber(notes[i + 1]) or 0 end
    else
      local p, k = string.match(f, '^\1(.-)%z(.*)$')
      local l = p and by_prefix[p]
      if l then l.held[#l.held + 1] = k end
    end
  end
  if #list == 0 then return nil end
  return list
end

-- The limits over key `k` (nil for none).
local function limits_over(list, k)
  local out
  for _, l in ipairs(list) do
    if string.sub(k, 1, #l.p) == l.p then
      out = out or {}
      out[#out + 1] = l
    end
  end
  return out
end

-- The starts under each rate limit of `list` within its window before `now`, counted once a call
-- over the starts of the longest window (trimmed to it).
local function count_starts(list, now)
  local longest = 0
  for _, l in ipairs(list) do
    l.started = 0
    if l.rate > 0 and l.window > longest then longest = l.window end
  end
  if longest == 0 then return end
  redis.call('ZREMRANGEBYSCORE', LIMIT_STARTS, '-inf', now - longest)
  local recent = redis.call('ZRANGEBYSCORE', LIMIT_STARTS, '(' .. (now - longest), '+inf', 'WITHSCORES')
  for i = 1, #recent, 2 do
    local p, at = string.match(recent[i], '^(.-)%z'), tonumber(recent[i + 1])
    for _, l in ipairs(list) do
      if l.p == p and l.rate > 0 and at > now - l.window then l.started = l.started + 1 end
    end
  end
end

-- Room left under limit `l` at `now`: worked out at its first use in a call, then kept up to
-- date by `take_room`. Running tasks whose lease ran out leave the limit here.
local function room(l, now)
  if l.left then return l.left end
  local left = math.huge
  if l.rate > 0 then left = l.rate - l.started end
  if l.running > 0 then
    local live = 0
    for _, k in ipairs(l.held) do
      if tonumber(redis.call('ZSCORE', LEASED, k) or 0) > now then
        live = live + 1
      else
        redis.call('HDEL', LIMITS, '\1' .. l.p .. '\0' .. k)
      end
    end
    left = math.min(left, l.running - live)
  end
  l.left = left
  return left
end

-- Whether task `k` may start at `now` under `list`; if so its room is taken (in this call's
-- counts: `note_starts` writes it). Returns that, and the limits over `k` (nil for none). A limit
-- found without room notes when (once a call).
local function take_room(list, k, now)
  local over = limits_over(list, k)
  if not over then return true, nil end
  for _, l in ipairs(over) do
    if room(l, now) <= 0 then
      if not l.noted then
        l.noted = true
        l.full = now
        redis.call('HSET', LIMITS, '\0' .. l.p, string.format('%d', now))
      end
      return false, over
    end
  end
  for _, l in ipairs(over) do l.left = l.left - 1 end
  return true, over
end

-- When a task under limits `over` is counted late from: the latest time one of them was found
-- without room, if after `due`.
local function late_from(over, due)
  local from = due
  for _, l in ipairs(over) do
    if l.full > from then from = l.full end
  end
  return from
end

-- Writes the start of task `k` (claim token `tok`) at `now` under the limits `over`.
local function note_start(over, k, tok, now)
  for _, l in ipairs(over) do
    if l.rate > 0 then redis.call('ZADD', LIMIT_STARTS, now, l.p .. '\0' .. tok) end
    if l.running > 0 then redis.call('HSET', LIMITS, '\1' .. l.p .. '\0' .. k, '') end
  end
end

-- The tasks `names` no longer run: they leave the running limits over them.
local function release_limits(names)
  if #names == 0 or redis.call('HLEN', LIMITS) == 0 then return end
  local list = limits_of()
  if not list then return end
  for _, l in ipairs(list) do
    if l.running > 0 then
      for _, k in ipairs(names) do
        if string.sub(k, 1, #l.p) == l.p then redis.call('HDEL', LIMITS, '\1' .. l.p .. '\0' .. k) end
      end
    end
  end
end

-- The tick's part: puts back at their due time, oldest due first, the held tasks that their
-- limits now have room for (at most `budget`), noting the limits still without room. Returns
-- how many it put back, and whether tasks are still held.
local function unhold(now, budget)
  local held = redis.call('ZRANGEBYSCORE', READY, HOLD, '+inf', 'WITHSCORES', 'LIMIT', 0, budget)
  if #held == 0 then return 0, false end
  local list = limits_of()
  if list then count_starts(list, now) end
  local back, n = {}, 0
  for i = 1, #held, 2 do
    local k = held[i]
    if not list or take_room(list, k, now) then
      back[n + 1], back[n + 2] = string.format('%d', tonumber(held[i + 1]) - HOLD), k
      n = n + 2
    end
  end
  zadd_all(READY, back)
  return n / 2, n / 2 < #held / 2 or #held / 2 == budget
end
