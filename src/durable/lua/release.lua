-- Gives up the leadership, if the token is still the leader's, so another node takes over now.
--
-- KEYS[1]  the wheel's meta key
-- ARGV[1]  key prefix   ARGV[2] fencing token
-- Returns  1 released, 0 not the leader.
--
-- Pushes a token on `lead`, which idle workers wait on beside `wake`: the one that takes it bids
-- for the lead at once instead of at its next periodic bid (one token: one bid wins).

if redis.call('GET', P .. 'leader') ~= ARGV[2] then return 0 end
redis.call('DEL', P .. 'leader')
redis.call('LPUSH', P .. 'lead', 1)
redis.call('LTRIM', P .. 'lead', 0, 0)
return 1
