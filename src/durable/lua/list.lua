--[[ Lists a page of the ready, running or dead tasks after a cursor, in an order that nothing but
  the tasks' own moves changes: ready tasks by due time, running ones by when they were claimed
  (includes/claims.lua), dead ones by when they died; then by key. Waiting tasks are listed by
  due_next.lua.

  Input:
    KEYS     the wheel's keys
    ARGV[1]  state: 'ready', 'running' or 'dead'
    ARGV[2]  the cursor's score (due, claim or death ms; 0 for the first page)
    ARGV[3]  the cursor's key ('' for the first page)   ARGV[4] limit
  Output:
    {Redis's clock in ms, the last key read, its score, '1' if `limit` keys were read (more may
    follow) else '0', then seven entries per task: key, score, due ms, deliveries, last error,
    payload, and for a running task the id of the node whose worker claimed it ('' otherwise, or
    when not known)}. A key read whose record is gone meanwhile is left out.
  Keys: READY, CLAIMED, DEAD, TASKS, HOLDERS, DEAD_TASKS.
]]
-- @include keys
-- @include clock
-- @include record
-- @include hash_all
-- @include zpage
local state, from, after, limit = ARGV[1], tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[4])

local set = ({ready = READY, running = CLAIMED, dead = DEAD})[state]
local page = zpage(set, from, after, math.huge, limit)
local names = {}
for i = 1, #page, 2 do names[#names + 1] = page[i] end
local recs = hmget_all(state == 'dead' and DEAD_TASKS or TASKS, names)
local held = {}
if state == 'running' then held = hmget_all(HOLDERS, names) end
local out = {string.format('%d', clock()), page[#page - 1] or '', page[#page] or '0', #names == limit and '1' or '0'}
for j, k in ipairs(names) do
  local rec = recs[j]
  if rec then
    local due, a, err, p, node
    if state == 'dead' then
      local d = decode_dead(rec)
      due, a, err, p, node = d.due, d.a, d.err, d.p, ''
    else
      local t = decode(rec)
      due, a, err, p, node = tostring(t.due), tostring(t.a), t.err, t.p, ''
      local tok, holder = string.match(held[j] or '', '^(%d+):(.*)$')
      if tok and tok == t.tok then node = holder end
    end
    out[#out + 1] = k
    out[#out + 1] = page[2 * j]
    out[#out + 1] = due
    out[#out + 1] = a
    out[#out + 1] = err
    out[#out + 1] = p
    out[#out + 1] = node
  end
end
return out
