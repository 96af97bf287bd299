--[[ Tries to take the leadership: succeeds when no node holds it, with a fencing token made of
  the node's id and a new epoch. A retry by the holder itself (its first reply was lost) gets
  its token back, renewed.

  Input:
    KEYS     the wheel's keys
    ARGV[1]  node id   ARGV[2] the leadership's lease in ms
  Output:
    {token, 0} with the token `<node>:<epoch>`; or {'', ms} when another node leads, with the
    ms its lease has left (-1 if it has no expiry), so the caller knows when to bid again.
  Keys: LEADER, EPOCH.
]]
-- @include keys
local node, lease = ARGV[1], tonumber(ARGV[2])

local cur = redis.call('GET', LEADER)
if cur then
  if string.sub(cur, 1, #node + 1) == node .. ':' then
    redis.call('PEXPIRE', LEADER, lease)
    return {cur, 0}
  end
  return {'', redis.call('PTTL', LEADER)}
end
local token = node .. ':' .. redis.call('INCR', EPOCH)
redis.call('SET', LEADER, token, 'PX', lease)
return {token, 0}
