--[[ Reads a page of the history of finished runs (includes/history.lua), newest first, from the
  run numbered `from` on, older ones after it. A run's place in the list is the head's number
  minus its own, so a page starts where the last one stopped whatever ended meanwhile (newer
  runs go in front; the oldest ones the bounds dropped are gone).

  Input:
    KEYS     the wheel's keys
    ARGV[1]  from: the number of the first run to read ('' for the newest)   ARGV[2] limit
  Output:
    {how many runs the partition has numbered (the newest's number), then the runs, newest
    first, as the history holds them (at most `limit`)}.
  Keys: META, HISTORY.
]]
-- @include keys
local from, limit = tonumber(ARGV[1]), tonumber(ARGV[2])

local numbered = tonumber(redis.call('HGET', META, 'history_seq') or 0)
local first = 0
if from then
  local head = redis.call('LINDEX', HISTORY, 0)
  if not head then return {string.format('%d', numbered)} end
  first = math.max(0, tonumber(string.match(head, '^(%d+):')) - from)
end
local out = redis.call('LRANGE', HISTORY, first, first + limit - 1)
table.insert(out, 1, string.format('%d', numbered))
return out
