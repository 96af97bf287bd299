-- Whether the task last finished under key `k` (acknowledged, buried or cancelled, within the
-- remembered time) was scheduled by request `rid`: `done:<key>` holds its request id, followed
-- by `/<cancel id>` when it was cancelled.
-- Keys: done:<key>.
-- @include keys
local function finished_by(k, rid)
  local done = redis.call('GET', done_key(k))
  return done ~= false and (done == rid or string.sub(done, 1, #rid + 1) == rid .. '/')
end
