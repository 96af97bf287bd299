--[[ Lists a page of the ready, running or dead tasks after a cursor, in an order that nothing but
  the tasks' own moves changes: ready tasks by due time, running ones in the order they were
  claimed (by claim token: includes/claims.lua), dead ones by when they died; then by key.
  Waiting tasks are listed by due_next.lua.

  Input:
    KEYS     the wheel's keys
    ARGV[1]  state: 'ready', 'running' or 'dead'
    ARGV[2]  the cursor's score (due ms, claim token or death ms; 0 for the first page)
    ARGV[3]  the cursor's key ('' for the first page)   ARGV[4] limit
  Output:
    {Redis's clock in ms, the last key read, its score, '1' if `limit` keys were read (more may
    follow) else '0', then twelve entries per task: key, score, due ms, deliveries, last error,
    payload, for a running task the id of the node whose worker claimed it and when (ms) ('' and
    '' otherwise, or when not known), then its series as record.lua keeps it: period ms, runs
    left, missed-run digit, spec (a dead letter keeps none: '0', '0', '0', '')}. A key read
    whose record is gone meanwhile, or holds another claim token, is left out.
  Keys: READY, CLAIMED, CLAIMS, DEAD, TASKS, DEAD_TASKS.
]]
-- @include keys
-- @include clock
-- @include record
-- @include hash_all
-- @include zpage
-- @include claims
local state, from, after, limit = ARGV[1], tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[4])

local set = ({ready = READY, running = CLAIMED, dead = DEAD})[state]
local page = zpage(set, from, after, math.huge, limit)
local names = {}
for i = 1, #page, 2 do names[#names + 1] = page[i] end
local recs = hmget_all(state == 'dead' and DEAD_TASKS or TASKS, names)
local out = {string.format('%d', clock()), page[#page - 1] or '', page[#page] or '0', #names == limit and '1' or '0'}
for j, k in ipairs(names) do
  local rec, score = recs[j], page[2 * j]
  local due, a, err, p, node, at
  local every, runs, missed, spec = '0', '0', '0', ''
  if rec and state == 'dead' then
    local d = decode_dead(rec)
    due, a, err, p = d.due, d.a, d.err, d.p
  elseif rec then
    local t = decode(rec)
    due, a, err, p = tostring(t.due), tostring(t.a), t.err, t.p
    every, runs, missed, spec = string.format('%d', t.every), string.format('%d', t.runs), t.missed, t.spec
    if state == 'running' then
      if t.tok == score then at, node = claim_of(t.tok) else rec = nil end
    end
  end
  if rec then
    out[#out + 1] = k
    out[#out + 1] = score
    out[#out + 1] = due
    out[#out + 1] = a
    out[#out + 1] = err
    out[#out + 1] = p
    out[#out + 1] = node or ''
    out[#out + 1] = at or ''
    out[#out + 1] = every
    out[#out + 1] = runs
    out[#out + 1] = missed
    out[#out + 1] = spec
  end
end
return out
