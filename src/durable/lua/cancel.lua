-- Cancels a batch of tasks by key, wherever they are (waiting, ready or in flight).
--
-- Safe to retry: each cancelled task's key remembers, for `ttl` ms, the request id of its
-- `schedule` and the id of this cancel (`done:<key>` = `<request id>/<cancel id>`). A retry of
-- this call whose first attempt landed answers 1 again (and leaves alone a task scheduled under
-- the key since), and a late retry of the cancelled task's `schedule` does not bring it back.
--
-- KEYS[1]  the wheel's meta key
-- ARGV[1]  key prefix   ARGV[2] slots   ARGV[3] ms to remember a cancelled task's ids
-- ARGV[4]  cancel id (the same for every retry of one call)   ARGV[5 ..] keys
-- Returns  one integer per key: 1 cancelled (by this call), 0 none pending.

local slots, ttl, cid = tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
local mine = '/' .. cid
local out, seen = {}, {}
for i = 5, #ARGV do
  local k = ARGV[i]
  local tk = P .. 't:' .. k
  local done = redis.call('GET', P .. 'done:' .. k)
  if seen[k] then
    -- The same key again in this call: the first of them cancelled it.
    out[#out + 1] = 0
  elseif done and string.sub(done, -#mine) == mine then
    seen[k] = true
    out[#out + 1] = 1
  else
    seen[k] = true
    local h = redis.call('HMGET', tk, 'tick', 'rid')
    if h[1] then
      unplace(k, tonumber(h[1]), slots)
      redis.call('DEL', tk)
      redis.call('SET', P .. 'done:' .. k, (h[2] or '') .. mine, 'PX', ttl)
      out[#out + 1] = 1
    else
      out[#out + 1] = 0
    end
  end
end
return out
