-- Gives up the leadership, if the token is still the leader's, so another node takes over now.
--
-- KEYS[1]  the wheel's meta key
-- ARGV[1]  key prefix   ARGV[2] fencing token
-- Returns  1 released, 0 not the leader.

if redis.call('GET', P .. 'leader') ~= ARGV[2] then return 0 end
redis.call('DEL', P .. 'leader')
return 1
