--[[ Counts the waiting and ready tasks by due time in `buckets` buckets of `bucket` ms from
  `from` ms: a task due before `from` (ready, late) counts in the first, one due after the last
  bucket in none. For a plot of what falls due next. The ring's slots are counted whole, each in
  the bucket of its tick (a cancelled task's entry counts until the cursor passes it); the
  caller names the slots of consecutive ticks from `first tick` on.

  Input:
    KEYS     the wheel's keys, then the slot keys of ticks first_tick, first_tick + 1, ...
    ARGV[1]  from ms   ARGV[2] bucket ms   ARGV[3] buckets   ARGV[4] first tick   ARGV[5] tick in ms
  Output:
    one count per bucket.
  Keys: READY, FAR and the declared slots.
]]
-- @include keys
local from, bucket, buckets = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local first_tick, tick_ms = tonumber(ARGV[4]), tonumber(ARGV[5])

local out = {}
for b = 1, buckets do
  local lo, hi = from + (b - 1) * bucket, from + b * bucket - 1
  if b == 1 then lo = '-inf' end
  out[b] = redis.call('ZCOUNT', READY, lo, hi) + redis.call('ZCOUNT', FAR, lo, hi)
end
for i = FIXED_KEYS + 1, #KEYS do
  local tick = first_tick + i - FIXED_KEYS - 1
  local b = math.max(1, math.floor((tick * tick_ms - from) / bucket) + 1)
  if b <= buckets then out[b] = out[b] + redis.call('LLEN', KEYS[i]) end
end
return out
