--[[ Acknowledges what a worker's handlers finished (as ack.lua does), then claims up to n ready
  tasks due by Redis's clock (rounded down: never early), oldest due first, for the worker: each
  is leased until Redis's now + lease, gets a fresh claim token and one more delivery. One call a cycle: what finished goes out on the call that
  fetches what comes next.

  Safe to retry: the acknowledgements are refused once done (a refusal changes nothing), and the
  call carries a claim id (the worker keeps it until a reply arrives) and remembers in CALL_KEY,
  for the lease (at most a minute or so: long enough for the worker's retries), when it claimed
  and the range of claim tokens it gave (a call's tokens are consecutive; the claim index,
  CLAIMED, says which tasks hold them), one string a call whatever it took; the worker's next
  claim drops the record (PREVIOUS_KEY). A retry
  whose first attempt landed gets those tasks again (those still held under their tokens),
  instead of leaving them leased to nobody until the lease runs out, which would cost each an
  attempt.

  Per task it writes what the claim changes and nothing else: the record's head (deliveries,
  claim token) before its unchanged tail and its claim token in CLAIMED; once a call, when,
  by which node and the lease, one entry for all the call's tasks (includes/claims.lua); the
  answer is the record itself, which the worker reads.

  A delivery to acknowledge whose cancel was requested (cancel_running.lua) ends as cancelled
  instead (cancelled.lua), and its acknowledgement is refused.

  While the wheel is paused (the field `paused` of META is set) it acknowledges and gives back
  what an earlier attempt took, but claims nothing new.

  A claim that takes all it asked for leaves more ready, perhaps: it pushes a wake-up token for
  another idle worker, unless one is already waiting on `wake` (so that busy workers, which never
  take the tokens, push none).

  Input:
    KEYS     the wheel's keys, then CALL_KEY (this claim's record), then PREVIOUS_KEY (the
             record of this worker's previous claim, answered and so no longer needed; the same
             as CALL_KEY when there is none)
    ARGV[1]  n   ARGV[2] lease in ms
    ARGV[3]  '1' to only get back what an earlier attempt took (a stopping worker), else '0'
    ARGV[4]  ms to remember what this claim took (at most the lease)
    ARGV[5]  tick in ms   ARGV[6] slots (to place a recurring task's next run)
    ARGV[7]  the id of the worker's node (recorded with each claim, for listing)
    ARGV[8]  the history's limit   ARGV[9] its age limit in ms (as for ack.lua)
    ARGV[10 + 4i] .. ARGV[13 + 4i]  per delivery to acknowledge first: its ACK_FIELDS fields, as
             for ack.lua
  Output:
    {claimed ms (Redis's clock, when this claim first ran; '0' when it took nothing), the
    acknowledgements' answers (one digit per delivery, as ack.lua answers), when to claim again
    (in ms from this claim's reading of the store's clock; '' for none), given when the claim
    took less than it asked for:
    the due time of the first task in `ready` not due yet (the tick moves a tick's tasks there
    before it begins: tick.lua), or when a rate limit has room for a task it holds back
    (limits.lua), whichever comes first; the
    start times a rate limit gave the tasks taken (ms, one per task joined by commas, '' for a
    task that starts at once; '' for all), then two entries per task: key, record (record.lua's
    format, with this delivery's count and claim token)}.

  Under limits (limits.lua) it first puts back the held tasks whose limits have room now, then
  takes ready tasks in due order, holding those whose limits have none.
  Keys: CALL_KEY, PREVIOUS_KEY, READY, SEQ, TASKS, LEASED, META, FIGURES, WAKE, CANCELLING,
  CLAIMED, CLAIMS, and through the
  acknowledgements those of ack.lua (HISTORY among them).
]]
-- @include keys
-- @include clock
-- @include record
-- @include zadd_all
-- @include zrem_all
-- @include hash_all
-- @include acknowledge
-- @include figures
-- @include cancelled
-- @include claims
-- @include history
-- @include limits
local n, lease = tonumber(ARGV[1]), tonumber(ARGV[2])
local replay_only, record_ms = ARGV[3] == '1', tonumber(ARGV[4])
local tick_ms, slots, node = tonumber(ARGV[5]), tonumber(ARGV[6]), ARGV[7]
local history = history_of(ARGV[8], ARGV[9])
-- The deliveries to acknowledge: delivery j's key is ARGV[ACKS_FROM + ACK_FIELDS * (j - 1)],
-- the rest of its fields after it.
local ACKS_FROM = 10

end_cancelled(ARGV, ACKS_FROM, history)
local acks = acknowledge(ARGV, ACKS_FROM, tick_ms, slots, history)
flush_history(history)
if PREVIOUS_KEY ~= CALL_KEY then redis.call('DEL', PREVIOUS_KEY) end
local out = {'0', acks, '', ''}

-- A retry of a call that landed: its record is '<claimed ms>:<first token>:<last token>', and
-- the claim index (CLAIMED, scored by token) names the tasks still held under those tokens.
local before = redis.call('GET', CALL_KEY)
if before then
  local ms, lo, hi = string.match(before, '^(%d+):(%d+):(%d+)$')
  -- Not this layout's record (none is written any other way): nothing to give back.
  if not ms then return out end
  out[1] = ms
  local held = redis.call('ZRANGEBYSCORE', CLAIMED, lo, hi, 'WITHSCORES')
  local names = {}
  for i = 1, #held, 2 do names[#names + 1] = held[i] end
  local recs = hmget_all(TASKS, names)
  for j, k in ipairs(names) do
    local rec = recs[j]
    if rec and tonumber(token_of(rec)) == tonumber(held[2 * j]) then
      out[#out + 1] = k
      out[#out + 1] = rec
    end
  end
  return out
end

if replay_only or n <= 0 or redis.call('HEXISTS', META, 'paused') == 1 then return out end

-- Under limits (limits.lua), the ready tasks in due order that their limits have room for within
-- LIMIT_HORIZON (a rate limit hands out the starts of that long at once, each with its start
-- time); the others are held (scored HOLD above their due time, after every task not held) until
-- a claim or the tick finds them room. Without, the first n.
local LIMIT_HORIZON = math.min(250, math.floor(lease / 4))
local limits, over_of, start_of, allowed_of = nil, {}, {}, {}
local names
-- Due by `due_by` (Redis's clock rounded down, so never early); `now` (rounded up) for the rest.
local down, now = clock()
local due_by = string.format('%d', down)
-- When the first task in `ready` that is not due yet is (a tick moves its tasks there a tick
-- ahead), for a claim that took less than it asked for; or `at` if sooner. One worker claims at
-- a due time, the first told of it (META's `next_claim`: its node and the time); the others are
-- told nothing and wait for a wake-up: that worker's claim passes one on when it takes all it
-- asks for (and forgets it was told), and the tick's, when it makes tasks ready or finds one due
-- for over a tick and unclaimed (so a worker that stopped, died or is busy delays the task by two
-- ticks at most).
local function next_due(at)
  local head = redis.call('ZRANGEBYSCORE', READY, '(' .. due_by, string.format('(%d', HOLD), 'LIMIT', 0, 1, 'WITHSCORES')
  local due = head[2]
  if due then
    local mine = node .. ' ' .. due
    local told = redis.call('HGET', META, 'next_claim')
    if told and told ~= mine and string.sub(told, -#due - 1) == ' ' .. due then
      due = nil
    elseif told ~= mine then
      redis.call('HSET', META, 'next_claim', mine)
    end
  end
  if due and (at == '' or tonumber(due) < tonumber(at)) then return due end
  return at
end
-- A time on the store's clock (ms, '' for none) as ms from this claim's reading of it: a node
-- counts them from when the reply reaches it, whatever its own reading of the store's clock.
local function from_now(at)
  if at == '' then return '' end
  return string.format('%d', math.max(0, tonumber(at) - down))
end
if #raw_limits() > 0 then
  unhold(now, 1000, LIMIT_HORIZON)
  limits = limits_of()
end
if limits then
  -- The first n, as without limits, when none of them is under a limit (a task held is).
  names = redis.call('ZRANGEBYSCORE', READY, '-inf', due_by, 'LIMIT', 0, n)
  for _, k in ipairs(names) do
    if limits_over(limits, k) then
      names = nil
      break
    end
  end
  if names then
    if #names == 0 then
      out[3] = from_now(next_due(next_room(limits, now, LIMIT_HORIZON)))
      return out
    end
    redis.call('ZREMRANGEBYRANK', READY, 0, #names - 1)
  end
end
if limits and not names then
  names = {}
  local held_any = false
  while #names < n do
    -- Held tasks are scored past any due time: a page holds none.
    local page = redis.call('ZRANGEBYSCORE', READY, '-inf', due_by, 'WITHSCORES', 'LIMIT', 0, n - #names)
    local taken, held = {}, {}
    for i = 1, #page, 2 do
      local k, score = page[i], tonumber(page[i + 1])
      local may, over, start, allowed = take_room(limits, k, now, LIMIT_HORIZON)
      if may then
        taken[#taken + 1] = k
        names[#names + 1] = k
        over_of[k], start_of[k], allowed_of[k] = over, start, allowed
      else
        held[#held + 1] = string.format('%d', score + HOLD)
        held[#held + 1] = k
      end
    end
    zrem_all(READY, taken)
    zadd_all(READY, held)
    if #held == 0 then break end
    held_any = true
  end
  save_limits(limits, held_any)
  if #names == 0 then
    out[3] = from_now(next_due(next_room(limits, now, LIMIT_HORIZON)))
    return out
  end
elseif not limits then
  names = redis.call('ZRANGEBYSCORE', READY, '-inf', due_by, 'LIMIT', 0, n)
  if #names == 0 then
    out[3] = from_now(next_due(''))
    return out
  end
  redis.call('ZREMRANGEBYRANK', READY, 0, #names - 1)
end
local last = redis.call('INCRBY', SEQ, #names)
local first = last - #names
local until_ms = string.format('%d', now + lease)
out[1] = string.format('%d', now)
-- The field name of each lateness bucket (late_bucket's), so that no number is formatted a task.
local LATE_FIELDS = {
  [0] = 'l0', 'l1', 'l2', 'l3', 'l4', 'l5', 'l6', 'l7', 'l8', 'l9', 'l10', 'l11', 'l12',
  'l13', 'l14', 'l15', 'l16', 'l17', 'l18', 'l19', 'l20', 'l21', 'l22', 'l23', 'l24',
}
local figures, claims, starts, spaced = {}, {}, {}, false
local recs = hmget_all(TASKS, names)
-- m tasks claimed so far; each table's entries are indexed from it (Lua's `#t` is a search).
local m = 0
for j, k in ipairs(names) do
  local rec = recs[j]
  if rec then
    local tok = string.format('%d', first + j)
    local due
    rec, due = claimed_record(rec, tok)
    local over = over_of[k]
    starts[m + 1] = ''
    if over then
      -- Under a limit: late only from when its limits let it start, and its start time if a
      -- rate limit spaces it later than now.
      due = math.min(math.max(due + 0, allowed_of[k]), now)
      note_start(over, k)
      if start_of[k] > now then
        starts[m + 1] = string.format('%d', math.ceil(start_of[k]))
        spaced = true
      end
    end
    local late = LATE_FIELDS[late_bucket(now - due)]
    figures[late] = (figures[late] or 0) + 1
    local i = 2 * m
    m = m + 1
    claims[i + 1], claims[i + 2] = tok, k
    out[i + 5], out[i + 6] = k, rec
  end
end
if limits then out[3] = next_room(limits, now, LIMIT_HORIZON) end
if #names < n then out[3] = next_due(out[3]) end
out[3] = from_now(out[3])
if spaced then out[4] = table.concat(starts, ',', 1, m) end
-- The new records: the answer's (key, record) pairs after its first four entries.
hset_all(TASKS, out, 5)
if m > 0 then
  record_claims(claims, first + 1, #names, out[1], node, until_ms)
  keep_skiplist(CLAIMED)
  redis.call('SET', CALL_KEY, string.format('%s:%d:%d', out[1], first + 1, last), 'PX', math.min(lease, record_ms))
end
redis.call('HINCRBY', META, 'handed_out', m)
figures.h = m
count_figures(figures, now)
if #names == n then
  -- Full, this worker may be busy at the time it was told: whoever claims next is told it instead.
  local told = redis.call('HGET', META, 'next_claim')
  if told and string.sub(told, 1, #node + 1) == node .. ' ' then redis.call('HDEL', META, 'next_claim') end
  if redis.call('LLEN', WAKE) == 0 then redis.call('LPUSH', WAKE, 1) end
end
if m == 0 then out[1] = '0' end
return out
