--[[ Schedules a batch of tasks, each under a key that must not be pending: one HMGET (is each
  key pending?) and one HSET (the new records) for the whole call, and one ZADD per ring slot, one
  for the far tier and one for `ready`. With ARGV[4] '1', task by task: an HSETNX, and for a
  pending key its move.

  Safe to retry: the call's answer is kept under its request id (CALL_KEY) for `ttl` ms, so a
  retry whose first attempt landed answers 2 for what it scheduled, even if those tasks have
  since been acknowledged, cancelled or buried, and schedules nothing again.

  Input:
    KEYS     the wheel's keys, then CALL_KEY (the call's request record), then the ring slot
             keys the tasks may go to (the caller's guess from its estimate of Redis's clock; a
             task whose slot is not among them waits in the far tier instead)
    ARGV[1]  tick in ms   ARGV[2] slots   ARGV[3] ms to keep the answer
    ARGV[4]  '1' to move a pending task to the new due time instead (schedule_or_reset), else '0'
    ARGV[5]  the period of a recurring task in ms (0: each task runs once)   ARGV[6] its runs
             (-1: forever)   ARGV[7] its missed-run policy (0 burst, 1 delay, 2 skip)
    ARGV[8 + 4i ..]  per task: key, payload, 'd' (delay) or 'a' (at), milliseconds
  Output:
    one integer per task: 1 scheduled; 2 scheduled by an earlier attempt of this call; 0 the key
    is pending (DuplicateKey); with ARGV[4] '1', 4 a pending task was moved (keeping its
    payload) and 3 a running one was left alone.
  Keys: CALL_KEY, TASKS, the declared slots, RING, FAR, READY, LEASED, CURSOR, META, WAKE.
]]
-- @include keys
-- @include wheel_now
-- @include record
-- @include request
-- @include place
-- @include zrem_all
-- @include hash_all
-- @include wake
local tick_ms, slots, ttl, reset = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3], ARGV[4] == '1'
local every, runs, missed = tonumber(ARGV[5]), tonumber(ARGV[6]), ARGV[7]

local kept = replayed()
if kept then
  for i, r in ipairs(kept) do if r == 1 then kept[i] = 2 end end
  return kept
end
local w = wheel_now(tick_ms, slots, FIXED_KEYS + 2)
local out, created, batch, woke = {}, 0, new_batch(), false
if not reset then
  -- One HMGET reads whether each key is pending, one HSET writes the new records, and `flush`
  -- one ZADD per slot: per task only its record and its ring entry. A key twice in one call is
  -- scheduled once, by its first item.
  local names, pending = records_of(ARGV, 8, 4)
  local fresh, taken = {}, {}
  local tail = string.format(':0:0:%d:%d:%s:0:', every, runs, missed)
  for j, k in ipairs(names) do
    local i = 4 * j + 4
    if pending[j] or taken[k] then
      out[j] = 0
    else
      taken[k] = true
      local due = tonumber(ARGV[i + 3])
      if ARGV[i + 2] == 'd' then due = w.up + due end
      local dues = string.format('%d', due)
      fresh[#fresh + 1] = k
      fresh[#fresh + 1] = dues .. tail .. ARGV[i + 1]
      place(k, due, w, batch, dues)
      created = created + 1
      out[j] = 1
    end
  end
  hset_all(TASKS, fresh)
else
  for i = 8, #ARGV, 4 do
    local k, mode, ms = ARGV[i], ARGV[i + 2], tonumber(ARGV[i + 3])
    local due = ms
    if mode == 'd' then due = w.up + ms end
    if redis.call('HSETNX', TASKS, k, new_record(due, ARGV[i + 1], every, runs, missed)) == 1 then
      place(k, due, w, batch)
      created = created + 1
      out[#out + 1] = 1
    else
      local t = decode(redis.call('HGET', TASKS, k))
      if t.tok ~= '0' and tonumber(redis.call('ZSCORE', LEASED, k) or 0) > w.down then
        out[#out + 1] = 3
      else
        -- Its old place: a far or ready entry goes now, a slot entry when the cursor passes it.
        -- What this call placed already is written first, so that nothing of it is left behind.
        woke = flush(batch) or woke
        batch = new_batch()
        t.due, t.tok = due, '0'
        redis.call('HSET', TASKS, k, encode(t))
        zrem_all(FAR, {k})
        zrem_all(READY, {k})
        zrem_all(LEASED, {k})
        place(k, due, w, batch)
        out[#out + 1] = 4
      end
    end
  end
end
if flush(batch) or woke then wake() end
if created > 0 then redis.call('HINCRBY', META, 'scheduled', created) end
remember(out, ttl)
return out
