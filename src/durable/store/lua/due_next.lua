--[[ Lists the waiting and ready tasks due next, by due time then key, from a cursor: those due in
  [from ms, until ms] that come after (from ms, after key) (all of `from ms` when the key is
  empty), at most `limit`. Running tasks are not listed. A slot holds keys alone: a slot entry
  is listed at its task's due time (from the record), if the task is not claimed, once, and not
  if its key was found in `ready` or the far tier (the entry is then an old place; see
  tick.lua).

  The caller names the ring slots of the ticks in the range (the range is cut to what the slots
  named cover); the far tier and `ready` are read by score.

  Input:
    KEYS     the wheel's keys, then the slot keys of the ticks in [from, until]
    ARGV[1]  from ms   ARGV[2] the key after which to start at `from` ('' for all of it)
    ARGV[3]  until ms   ARGV[4] limit   ARGV[5] 'waiting' to leave the ready tasks out, else ''
  Output:
    Redis's clock in ms, then nine entries per task (key, state 'waiting' or 'ready', due ms,
    deliveries, payload, then its series as record.lua keeps it: period ms, runs left,
    missed-run digit, spec), oldest due first.
  Keys: READY, FAR, TASKS and the declared slots.
]]
-- @include keys
-- @include clock
-- @include record
-- @include hash_all
-- @include zpage
local from, after, until_ms, limit = tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local waiting_only = ARGV[5] == 'waiting'

local found, seen = {}, {}
local function consider(k, due, state)
  if seen[k] then return end
  seen[k] = true
  if due < from or due > until_ms or (due == from and after ~= '' and k <= after) then return end
  found[#found + 1] = {k, due, state}
end
-- The first `limit` of a sorted set after the cursor, however many tie at `from`.
local function read(key, state)
  local r = zpage(key, from, after, until_ms, limit)
  for i = 1, #r, 2 do consider(r[i], tonumber(r[i + 1]), state) end
end
if not waiting_only then read(READY, 'ready') end
read(FAR, 'waiting')
local names = {}
for i = FIXED_KEYS + 1, #KEYS do
  for _, k in ipairs(redis.call('LRANGE', KEYS[i], 0, -1)) do names[#names + 1] = k end
end
local recs = hmget_all(TASKS, names)
for j, k in ipairs(names) do
  local due, tok
  if recs[j] then due, tok = head_of(recs[j]) end
  -- (An old slot entry of a task now ready is listed from `ready`, or not at all.)
  if tok == '0' and not (waiting_only and redis.call('ZSCORE', READY, k)) then consider(k, tonumber(due), 'slot') end
end
table.sort(found, function(a, b) return a[2] < b[2] or (a[2] == b[2] and a[1] < b[1]) end)
local out = {string.format('%d', clock())}
for _, f in ipairs(found) do
  if #out > limit * 9 then break end
  local rec = redis.call('HGET', TASKS, f[1])
  if rec then
    local t = decode(rec)
    out[#out + 1] = f[1]
    out[#out + 1] = f[3] == 'ready' and 'ready' or 'waiting'
    out[#out + 1] = tostring(t.due)
    out[#out + 1] = tostring(t.a)
    out[#out + 1] = t.p
    out[#out + 1] = string.format('%d', t.every)
    out[#out + 1] = string.format('%d', t.runs)
    out[#out + 1] = t.missed
    out[#out + 1] = t.spec
  end
end
return out
