-- Schedules a batch of tasks, each under a key that must not be pending.
--
-- KEYS[1]  the wheel's meta key
-- ARGV[1]  key prefix   ARGV[2] tick in ms   ARGV[3] slots
-- ARGV[4 + 5i ..]  per task: key, payload, 'd' (delay) or 'a' (at), milliseconds, request id
-- Returns  one integer per task: 1 scheduled; 2 already scheduled by this request id (a retry
--          whose first attempt landed, even if its task has since been acknowledged, cancelled
--          or buried); 0 the key is pending under another request (DuplicateKey).

local tick_ms, slots = tonumber(ARGV[2]), tonumber(ARGV[3])
local now = now_up()
local now_tick = math.floor(now_ms() / tick_ms)
local cursor = cursor_of(now, tick_ms)
local out, created, ready = {}, 0, false
for i = 4, #ARGV, 5 do
  local k, rid = ARGV[i], ARGV[i + 4]
  local tk = P .. 't:' .. k
  local cur = redis.call('HGET', tk, 'rid')
  if cur then
    out[#out + 1] = (cur == rid) and 2 or 0
  elseif finished_by(k, rid) then
    out[#out + 1] = 2
  else
    local ms = tonumber(ARGV[i + 3])
    local due = ms
    if ARGV[i + 2] == 'd' then due = now + ms end
    local tick = due_tick(due, tick_ms)
    redis.call('HSET', tk, 'p', ARGV[i + 1], 'due', due, 'tick', tick, 'a', 0, 'rid', rid)
    if place(k, tick, due, cursor, slots, now_tick) then ready = true end
    created = created + 1
    out[#out + 1] = 1
  end
end
if created > 0 then redis.call('HINCRBY', P .. 'meta', 'scheduled', created) end
if ready then wake() end
return out
