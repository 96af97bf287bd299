--[[ Cancels a batch of tasks by key, if they are waiting (in a slot or the far tier) or ready.
  A task a worker holds under a live lease is running (its handler has started, or its claim's
  reply is on its way and will start it) and is left alone: its lease runs its course. A task
  whose lease ran out (its worker died or outran it) is no longer running and is cancelled, so
  that no other delivery starts. So when this answers 1, no handler of the task starts after
  it, on any node.

  Safe to retry: each cancelled task's key remembers, for `ttl` ms, the request id of its
  `schedule` and the id of this cancel (`done:<key>` = `<request id>/<cancel id>`). A retry of
  this call whose first attempt landed answers 1 again (and leaves alone a task scheduled under
  the key since), and a late retry of the cancelled task's `schedule` does not bring it back.

  Input:
    KEYS[1]  the wheel's meta key
    ARGV[1]  key prefix   ARGV[2] slots   ARGV[3] ms to remember a cancelled task's ids
    ARGV[4]  cancel id (the same for every retry of one call)   ARGV[5 ..] keys
  Output:
    one integer per key: 1 cancelled (by this call), 0 none pending, 2 running (left alone).
  Keys: t:<key>, done:<key>, leased, and the task's place (slot:<i>, ring, far, ready).
]]
-- @include keys
-- @include now_ms
-- @include unplace
local slots, ttl, cancel_id = tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]

local mine = '/' .. cancel_id
local out, seen = {}, {}
local now
for i = 5, #ARGV do
  local k = ARGV[i]
  local tk = task_key(k)
  local done = redis.call('GET', done_key(k))
  if seen[k] then
    -- The same key again in this call: the first of them cancelled it.
    out[#out + 1] = 0
  elseif done and string.sub(done, -#mine) == mine then
    seen[k] = true
    out[#out + 1] = 1
  else
    seen[k] = true
    local h = redis.call('HMGET', tk, 'tick', 'rid', 'tok')
    if h[3] then now = now or now_ms() end
    if h[3] and tonumber(redis.call('ZSCORE', LEASED, k) or 0) > now then
      out[#out + 1] = 2
    elseif h[1] then
      unplace(k, tonumber(h[1]), slots)
      redis.call('DEL', tk)
      redis.call('SET', done_key(k), (h[2] or '') .. mine, 'PX', ttl)
      out[#out + 1] = 1
    else
      out[#out + 1] = 0
    end
  end
end
return out
