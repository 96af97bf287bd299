--[[ Schedules a batch of tasks, each under a key that must not be pending.

  Input:
    KEYS[1]  the wheel's meta key (routes the call to the wheel's slot)
    ARGV[1]  key prefix   ARGV[2] tick in ms   ARGV[3] slots
    ARGV[4 + 5i ..]  per task: key, payload, 'd' (delay) or 'a' (at), milliseconds, request id
  Output:
    one integer per task: 1 scheduled; 2 already scheduled by this request id (a retry whose
    first attempt landed, even if its task has since been acknowledged, cancelled or buried);
    0 the key is pending under another request (DuplicateKey).
  Keys: t:<key>, done:<key>, cursor, the task's place (slot:<i>, ring, far or ready), meta, wake.
]]
-- @include keys
-- @include now_ms
-- @include now_up
-- @include due_tick
-- @include cursor_of
-- @include place
-- @include finished_by
-- @include wake
local tick_ms, slots = tonumber(ARGV[2]), tonumber(ARGV[3])

local now = now_up()
local now_tick = math.floor(now_ms() / tick_ms)
local cursor = cursor_of(now, tick_ms)
local out, created, ready = {}, 0, false
for i = 4, #ARGV, 5 do
  local k, payload, mode, ms, rid = ARGV[i], ARGV[i + 1], ARGV[i + 2], tonumber(ARGV[i + 3]), ARGV[i + 4]
  local tk = task_key(k)
  local cur = redis.call('HGET', tk, 'rid')
  if cur then
    out[#out + 1] = (cur == rid) and 2 or 0
  elseif finished_by(k, rid) then
    out[#out + 1] = 2
  else
    local due = ms
    if mode == 'd' then due = now + ms end
    local tick = due_tick(due, tick_ms)
    redis.call('HSET', tk, 'p', payload, 'due', due, 'tick', tick, 'a', 0, 'rid', rid)
    if place(k, tick, due, cursor, slots, now_tick) then ready = true end
    created = created + 1
    out[#out + 1] = 1
  end
end
if created > 0 then redis.call('HINCRBY', META, 'scheduled', created) end
if ready then wake() end
return out
