--[[ Gives up the leadership, if the token is still the leader's, so another node takes over
  now. Pushes a token on `lead`, which idle workers wait on beside `wake`: the one that takes it
  bids for the lead at once instead of at its next periodic bid (one token: one bid wins).

  Input:
    KEYS     the wheel's keys
    ARGV[1]  fencing token
  Output:
    1 released, 0 not the leader.
  Keys: LEADER, LEAD.
]]
-- @include keys
local token = ARGV[1]

if redis.call('GET', LEADER) ~= token then return 0 end
redis.call('DEL', LEADER)
redis.call('LPUSH', LEAD, 1)
redis.call('LTRIM', LEAD, 0, 0)
return 1
