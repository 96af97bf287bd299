--[[ Gives up the leadership, if the token is still the leader's, so another node takes over
  now. Pushes a token on `lead`, which idle workers wait on beside `wake`: the one that takes it
  bids for the lead at once instead of at its next periodic bid (one token: one bid wins).

  Input:
    KEYS[1]  the wheel's meta key
    ARGV[1]  key prefix   ARGV[2] fencing token
  Output:
    1 released, 0 not the leader.
  Keys: leader, lead.
]]
-- @include keys
local token = ARGV[2]

if redis.call('GET', LEADER) ~= token then return 0 end
redis.call('DEL', LEADER)
redis.call('LPUSH', LEAD, 1)
redis.call('LTRIM', LEAD, 0, 0)
return 1
