--[[ Reads a page of the history of finished runs (includes/history.lua), newest first, from the
  run numbered `from` on, older ones after it. Run `n` is at index `n - history_dropped - 1`, so
  a page starts where the last one stopped whatever ended meanwhile (newer runs come after it in
  the list; the oldest ones the bounds dropped are gone).

  Input:
    KEYS     the wheel's keys
    ARGV[1]  from: the number of the first run to read ('' for the newest)   ARGV[2] limit
  Output:
    {how many runs the partition has numbered, the number of the first run answered (or of the
    place read from, when none is), then the runs, newest first, as the history holds them (at
    most `limit`)}.
  Keys: META, HISTORY.
]]
-- @include keys
local from, limit = tonumber(ARGV[1]), tonumber(ARGV[2])

local counts = redis.call('HMGET', META, 'history_seq', 'history_dropped')
local numbered, dropped = tonumber(counts[1] or 0), tonumber(counts[2] or 0)
local newest = math.min(from or numbered, numbered)
local out = {string.format('%d', numbered), string.format('%d', newest)}
local hi = newest - dropped - 1
if hi < 0 then return out end
local runs = redis.call('LRANGE', HISTORY, math.max(0, hi - limit + 1), hi)
for i = #runs, 1, -1 do out[#out + 1] = runs[i] end
return out
