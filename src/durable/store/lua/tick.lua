--[[ Moves the cursor towards Redis's current tick, if the caller holds the leadership: requeues
  tasks whose lease expired, promotes far-tier tasks that come within the declared slots (or are
  already due: straight to `ready`), and moves the tasks of each tick it passes from their slot
  to `ready`. Renews the leadership.

  Only the slot keys the caller declared are touched: the leader declares the slots from the
  cursor up to a few ticks past Redis's clock (from the last reply), and the cursor stops before
  a slot that is not declared; the reply then says 'more', with the cursor and the clock for the
  next call's slots.

  A slot entry is moved only if its task's record still places it there (due at that tick, no
  claim token): `cancel` and `reschedule` leave the old entry in its slot (they do not know its
  key), and this is where it is dropped.

  Bounded: at most `budget` tasks per call; the reply says when more is left, and the caller
  calls again at once. A retried or repeated call is harmless: a task is moved to `ready` only
  once the cursor has reached its absolute due tick, and Redis's clock the tick before it: the
  cursor runs one tick ahead of the clock, so that a tick's tasks wait in `ready`, scored by their
  due time, before it begins, and `claim.lua` hands each out once Redis's clock reaches its due
  time (never early), not on the next tick boundary. When the ring is empty the cursor jumps
  straight to the tick after the current one (an idle wheel costs O(1)).

  Input:
    KEYS     the wheel's keys, then the slot keys of the ticks after the cursor
    ARGV[1]  fencing token (the leader key's value)   ARGV[2] tick in ms   ARGV[3] slots
    ARGV[4]  the leadership's lease in ms   ARGV[5] budget   ARGV[6] max attempts (the node's: a
             task with its own, see record.lua, uses its own)
    ARGV[7]  the most dead letters kept (0: no limit)   ARGV[8] the longest a dead letter is
             kept in ms (0: no limit); the oldest beyond either go, at most `budget` per call
    ARGV[9]  the declared slots' indices (packed, as for schedule)
    ARGV[10] the history's limit   ARGV[11] its age limit in ms (as for ack.lua: a task whose
             last lease ran out, or that was cancelled while it ran, goes in the history with
             no start or handler time, includes/history.lua)
    ARGV[12] '1': say when the next tick has work, for a leader that sleeps until then (a store
             in its own process, which tells that leader of every change); '0': do not look
    ARGV[13] how many ticks the cursor runs ahead of the clock (at least 1, the default): one,
             and as many more as the leader's round trip takes, so that a tick's tasks are in
             `ready` before that tick begins even when the next tick call is a slow link away
  Output:
    {'refused'} if the token is not the leader's; else {'more' or 'done', cursor, Redis time in
    ms, tasks made ready, next}: with ARGV[12] '1' and 'done', `next` is the earliest time (ms)
    at which a tick may have work: the next tick's while the ring holds entries, else the
    earliest of the tick before the far tier's first due time, the first lease to run out and
    the oldest dead letter's end of retention; '' when nothing waits, or when not asked.
  Keys: LEADER, CURSOR, RING, FAR, READY, LEASED, TASKS, UPSERTS, META, FIGURES, WAKE, DEAD, DEAD_TASKS,
  CANCELLING, CLAIMED, HISTORY, and the
  declared slots.
]]
-- @include keys
-- @include clock
-- @include record
-- @include due_tick
-- @include zadd_all
-- @include rpush_all
-- @include zrem_all
-- @include hash_all
-- @include cancelled
-- @include claims
-- @include wake
-- @include advance
-- @include bury
-- @include figures
-- @include queued
-- @include history
-- @include limits
local token, tick_ms, slots, lease = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
local budget, max_attempts = tonumber(ARGV[5]), tonumber(ARGV[6])
local dead_max, dead_max_age = tonumber(ARGV[7]), tonumber(ARGV[8])
local declared = declared_slots(FIXED_KEYS + 1, ARGV[9])
local history = history_of(ARGV[10], ARGV[11])
local say_next = ARGV[12] == '1'
local ahead = math.max(tonumber(ARGV[13] or '1') or 1, 1)

-- Leases that ran out: each task of their calls still held goes back to `ready`, or to the dead
-- letters after its last try. The calls are taken whole, until their tasks reach the budget.
-- Returns how many leases and tasks it looked at and how many tasks it made ready.
local function requeue_expired(now)
  local calls = redis.call('ZRANGEBYSCORE', LEASED, '-inf', now, 'LIMIT', 0, budget)
  if #calls == 0 then return 0, 0 end
  local expired, toks, taken = {}, {}, {}
  for _, first in ipairs(calls) do
    if #expired >= budget then break end
    taken[#taken + 1] = first
    if string.match(first, '^%d+$') then
      local call = redis.call('ZRANGEBYSCORE', CLAIMS, first, first, 'LIMIT', 0, 1)[1]
      local n = tonumber(string.match(call or '', '^%d+:(%d+):') or 0)
      local held = n > 0 and redis.call('ZRANGEBYSCORE', CLAIMED, first, first + n - 1, 'WITHSCORES') or {}
      for i = 1, #held, 2 do
        expired[#expired + 1] = held[i]
        toks[#toks + 1] = held[i + 1]
      end
    else
      -- A task's own lease entry, as wheels kept them before one lease a call: its task goes
      -- back as any other whose lease ran out.
      local tok = redis.call('ZSCORE', CLAIMED, first)
      if tok then
        expired[#expired + 1] = first
        toks[#toks + 1] = tok
      end
    end
  end
  zrem_all(LEASED, taken)
  forget_claims(expired, toks)
  local to_ready, dead, buried, replaced = {}, {}, 0, {}
  local queued
  local recs = hmget_all(TASKS, expired)
  for j, k in ipairs(expired) do
    local rec, tok = recs[j], toks[j]
    -- A task held under its call's token; any other entry is stale and just goes. One whose
    -- cancel was requested ends as cancelled instead (cancelled.lua).
    local live = rec and tonumber(token_of(rec)) == tonumber(tok) and end_cancelled({k, token_of(rec)}, 1, history) == 0
    if live then
      local t = decode(rec)
      if t.a >= (retry_limits(t.retry, max_attempts)) then
        bury(k, t, 'lease expired', now)
        add_history(history, k, rec, 'd', nil, 'lease expired')
        buried = buried + 1
        -- An upsert queued behind the run (queued.lua) takes the place of what comes next.
        queued = queued or queued_of(expired)
        local q = queued[j]
        if q then
          redis.call('HSET', TASKS, k, q)
          redis.call('ZADD', FAR, record_due(q), k)
          replaced[#replaced + 1] = k
        -- A series with a spec has no node's answer here: its next run is due now (advance.lua).
        elseif advance(t, now, nil) then
          -- A recurring task's series goes on: its next run waits in the far tier (promoted below).
          redis.call('HSET', TASKS, k, encode(t))
          redis.call('ZADD', FAR, t.due, k)
        else
          dead[#dead + 1] = k
        end
      else
        -- Delivered again, as at-least-once promises; an upsert queued behind it stays queued.
        t.tok, t.err = '0', 'lease expired'
        redis.call('HSET', TASKS, k, encode(t))
        to_ready[#to_ready + 1] = t.due
        to_ready[#to_ready + 1] = k
      end
    end
  end
  zadd_all(READY, to_ready)
  drop_queued(replaced)
  if #dead > 0 then zrem_all(TASKS, dead, 'HDEL') end
  if buried > 0 then redis.call('HINCRBY', META, 'dead_lettered', buried) end
  if #to_ready > 0 then redis.call('HINCRBY', META, 'retried', #to_ready / 2) end
  -- A lease that ran out is a failed delivery.
  if #expired > 0 then count_figures({ f = buried + #to_ready / 2, d = buried }, now) end
  flush_history(history)
  return #taken + #expired, #to_ready / 2
end

-- The last tick after the cursor whose slot, and every slot before it, was declared.
local function window_end(cursor)
  local t = cursor
  while t < cursor + slots and declared[(t + 1) % slots] do t = t + 1 end
  return t
end

-- The far tier's tasks due by the end of the declared window: those due by the end of the tick
-- after Redis's clock (`ready_tick`) go to `ready`, the others into their (declared) slot. A task the cursor passed but the clock
-- has not reached (it stepped back) stays, waiting for the clock. The lowest-scored come first,
-- so they are removed by rank in one command; the ring entries go in one RPUSH per slot. Scores
-- are written as Redis gave them (strings). Returns how many left the far tier and how many of
-- them became ready.
local function promote_far(cursor, ready_tick, room)
  local horizon = math.max(window_end(cursor), ready_tick)
  local far = redis.call('ZRANGEBYSCORE', FAR, '-inf', horizon * tick_ms, 'WITHSCORES', 'LIMIT', 0, room)
  if #far == 0 then return 0, 0 end
  redis.call('ZREMRANGEBYRANK', FAR, 0, #far / 2 - 1)
  local to_ready, ring, keep, into_ring = {}, {}, {}, 0
  for i = 1, #far, 2 do
    local k, score = far[i], far[i + 1]
    local tick = due_tick(tonumber(score), tick_ms)
    local sk = tick > ready_tick and tick > cursor and declared[tick % slots]
    if sk then
      local entries = ring[sk]
      if entries then entries[#entries + 1] = k else ring[sk] = {k} end
    else
      local list = tick <= ready_tick and to_ready or keep
      list[#list + 1] = score
      list[#list + 1] = k
    end
  end
  zadd_all(READY, to_ready)
  zadd_all(FAR, keep)
  for sk, entries in pairs(ring) do into_ring = into_ring + rpush_all(sk, entries) end
  if into_ring > 0 then redis.call('INCRBY', RING, into_ring) end
  return (#far - #keep) / 2, #to_ready / 2
end

-- Moves the entries of the tick after the cursor from their slot to `ready`, up to `room` of
-- them, those whose task's record still places it at this tick, unclaimed. Any other entry is an
-- old place of a task cancelled, moved or claimed since (whatever changed its record placed it
-- anew, or ended it), and is dropped; a key twice in the slot becomes ready once. Returns the
-- new cursor (unchanged while the slot still holds entries, or when its key was not declared),
-- how many entries it took and how many tasks became ready.
local function step_ring(cursor, room)
  local c = cursor + 1
  local sk = declared[c % slots]
  if not sk then return cursor, 0, 0 end
  local popped = redis.call('LPOP', sk, room) or {}
  local made = 0
  if #popped > 0 then
    redis.call('DECRBY', RING, #popped)
    local recs = hmget_all(TASKS, popped)
    local to_ready = {}
    -- Due at tick c (rounded up, as due_tick places it): after the tick before, by tick c.
    local after, by, r = (c - 1) * tick_ms, c * tick_ms, 0
    for j, k in ipairs(popped) do
      local due, tok
      if recs[j] then due, tok = head_of(recs[j]) end
      -- `due + 0` reads the text once; tonumber reads it twice.
      local d = tok == '0' and due + 0
      if d and d > after and d <= by then
        to_ready[r + 1], to_ready[r + 2] = due, k
        r = r + 2
      end
    end
    made = zadd_all(READY, to_ready)
  end
  if redis.call('EXISTS', sk) == 1 then return cursor, #popped, made end
  return c, #popped, made
end

-- The dead letters past their retention, oldest first: by age, then beyond the count.
local function trim_dead(now)
  local old = {}
  if dead_max_age > 0 then
    old = redis.call('ZRANGEBYSCORE', DEAD, '-inf', now - dead_max_age, 'LIMIT', 0, budget)
  end
  if dead_max > 0 and #old < budget then
    local over = redis.call('ZCARD', DEAD) - #old - dead_max
    if over > 0 then
      old = redis.call('ZRANGE', DEAD, 0, #old + math.min(over, budget - #old) - 1)
    end
  end
  if #old > 0 then
    zrem_all(DEAD, old)
    zrem_all(DEAD_TASKS, old, 'HDEL')
  end
end

if redis.call('GET', LEADER) ~= token then return {'refused'} end
redis.call('PEXPIRE', LEADER, lease)

local now = clock()
local now_tick = math.floor(now / tick_ms)
-- The last tick whose tasks may wait in `ready`: the one after the clock's (see above), or
-- further on a slow link.
local ready_tick = now_tick + ahead
local cursor = tonumber(redis.call('GET', CURSOR) or now_tick)
local work, ready = requeue_expired(now)
trim_dead(now)
while work < budget do
  local moved, made_ready = promote_far(cursor, ready_tick, budget - work)
  work, ready = work + moved, ready + made_ready
  if work >= budget or cursor >= ready_tick then break end
  if tonumber(redis.call('GET', RING) or '0') <= 0 then
    -- Nothing in the ring: every tick up to the next is empty; the far tier follows next round.
    cursor = ready_tick
  else
    local next_cursor, stepped, made = step_ring(cursor, budget - work)
    work, ready = work + stepped, ready + made
    if next_cursor == cursor then break end
    cursor = next_cursor
  end
  redis.call('SET', CURSOR, cursor)
end

-- The tasks a limit held back that it now has room for (limits.lua).
local unheld, still_held = unhold(now, math.max(budget - work, 1), 0)
ready = ready + unheld
-- A task in `ready` due for over a tick and still unclaimed: the worker told its time (claim.lua's
-- `next_claim`) stopped, died or is busy, or a wake-up was lost. Waking one idle worker then keeps
-- such a task at most two ticks late (a task claimed on time is claimed within milliseconds, so
-- this wakes nobody while workers keep up, however often the tick runs).
local due_unclaimed = ready == 0
  and #redis.call('ZRANGEBYSCORE', READY, '-inf', string.format('%d', now - tick_ms), 'LIMIT', 0, 1) > 0
if ready > 0 then keep_skiplist(READY) end
if ready > 0 or due_unclaimed then wake() end
-- When a tick next may have work: the next tick while the ring holds entries; else the earliest
-- score among the far tier, the leases and (with an age limit) the dead letters' ends.
local function next_work()
  -- The cursor runs `ahead` ticks ahead of the clock: the next slot is due to move once the clock
  -- has moved on by one.
  if still_held or tonumber(redis.call('GET', RING) or '0') > 0 then
    return tostring(math.max(cursor - ahead + 1, now_tick + 1) * tick_ms)
  end
  local first, at = nil, ''
  local function consider(key, plus)
    local head = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
    if head[2] then
      local score = tonumber(head[2]) + plus
      if not first or score < first then first, at = score, string.format('%d', math.ceil(score)) end
    end
  end
  -- A far task moves to `ready` `ahead` ticks before its own.
  consider(FAR, -ahead * tick_ms)
  -- The first task in `ready` not due yet (not one a limit holds): the tick after it falls due
  -- wakes a worker if none claimed it (above).
  local head = redis.call('ZRANGEBYSCORE', READY, '(' .. string.format('%d', now), string.format('(%d', HOLD), 'WITHSCORES', 'LIMIT', 0, 1)
  if head[2] then
    local score = tonumber(head[2])
    if not first or score < first then first, at = score, string.format('%d', score) end
  end
  consider(LEASED, 0)
  if dead_max_age > 0 then consider(DEAD, dead_max_age) end
  return at
end

local more = 'done'
if work >= budget or cursor < ready_tick then more = 'more' end
local next_at = ''
if say_next and more == 'done' then next_at = next_work() end
return {more, tostring(cursor), tostring(now), tostring(ready), next_at}
