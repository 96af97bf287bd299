--[[ Sets, clears or lists the wheel's limits by key prefix (includes/limits.lua says how they are
  kept and obeyed).

  Input:
    KEYS     the wheel's keys
    ARGV[1]  'set', 'clear' or 'list'
    ARGV[2]  the prefix (set, clear)   ARGV[3] the limit, '<rate>/<window ms>/<running>' (set)
  Output:
    set: 1 if the prefix had no limit, else 0 (replaced)
    clear: 1 if the prefix had a limit, else 0; the tasks any limit held go back to their due
      time in `ready` (a claim holds again those another limit still covers), and idle workers
      are woken
    list: {prefix, limit, ...} in the order of the prefixes
  Keys: LIMITS, READY, WAKE.
]]
-- @include keys
-- @include limits
-- @include wake
local op, p = ARGV[1], ARGV[2]
if op == 'set' then
  local old = redis.call('HGET', LIMITS, p)
  redis.call('HSET', LIMITS, p, ARGV[3])
  -- The rate's next free start follows the new spacing from the last start (the old next free
  -- start less the old spacing): a rate raised has room that much sooner, one lowered later.
  local slot = tonumber(redis.call('HGET', LIMITS, '\2' .. p) or '')
  if old and slot then
    local old_rate, old_window = string.match(old, '^(%d+)/(%d+)/')
    local rate, window = string.match(ARGV[3], '^(%d+)/(%d+)/')
    old_rate, old_window, rate, window = tonumber(old_rate), tonumber(old_window), tonumber(rate), tonumber(window)
    if rate > 0 and old_rate > 0 then
      local last = slot - old_window / old_rate * SPACING_MARGIN
      redis.call('HSET', LIMITS, '\2' .. p, string.format('%.3f', last + window / rate * SPACING_MARGIN))
    elseif rate == 0 then
      redis.call('HDEL', LIMITS, '\2' .. p)
    end
  end
  -- The held tasks that now have room go back at the next claim or tick.
  redis.call('HSET', LIMITS, '\3', '1')
  wake()
  return old and 0 or 1
elseif op == 'clear' then
  local had = redis.call('HDEL', LIMITS, p)
  if had == 0 then return 0 end
  redis.call('HDEL', LIMITS, '\0' .. p, '\2' .. p, '\3')
  local running = {}
  for _, f in ipairs(redis.call('HKEYS', LIMITS)) do
    if string.sub(f, 1, #p + 2) == '\1' .. p .. '\0' then running[#running + 1] = f end
  end
  if #running > 0 then redis.call('HDEL', LIMITS, unpack(running)) end
  local held = redis.call('ZRANGEBYSCORE', READY, HOLD, '+inf', 'WITHSCORES')
  if #held > 0 then
    local back = {}
    for i = 1, #held, 2 do
      back[#back + 1] = string.format('%d', tonumber(held[i + 1]) - HOLD)
      back[#back + 1] = held[i]
    end
    zadd_all(READY, back)
    wake()
  end
  return 1
else
  local out = {}
  local all = redis.call('HGETALL', LIMITS)
  local names, spec = {}, {}
  for i = 1, #all, 2 do
    if string.byte(all[i], 1) > 3 then
      names[#names + 1] = all[i]
      spec[all[i]] = all[i + 1]
    end
  end
  table.sort(names)
  for _, name in ipairs(names) do
    out[#out + 1] = name
    out[#out + 1] = spec[name]
  end
  return out
end
