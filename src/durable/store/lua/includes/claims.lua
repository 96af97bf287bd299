-- The claims of the running tasks, for listing them (list.lua) and for a retried claim, which
-- finds the tasks it took by their tokens' range (claim.lua). CLAIMED holds their keys scored by
-- their claim token, which says in which order they were claimed; CLAIMS holds one member per
-- claim call, '<first token>:<tasks>:<claimed ms>:<node>' scored by its first token, the tokens
-- of a call being consecutive: when its tasks were claimed, and the id of the node whose worker
-- claimed them. A claim writes both (claim.lua), one entry a task and one a call, and drops the
-- calls older than the oldest task still in CLAIMED; whatever ends a lease (takes a task's entry
-- out of LEASED) forgets its claim with `forget_claims`.
-- Keys: CLAIMED, CLAIMS.
-- @include keys
-- @include zrem_all
-- @include zadd_all
-- @include constants
local function forget_claims(names)
  zrem_all(CLAIMED, names)
end
-- Records a claim call: `pairs` (claim token, key per task) in CLAIMED; the call itself, whose
-- `n` tokens start at `first`, in CLAIMS; then drops the calls before the one that holds the
-- oldest token still in CLAIMED (none of their tasks runs).
local function record_claims(pairs, first, n, claimed_ms, node)
  zadd_all(CLAIMED, pairs)
  redis.call('ZADD', CLAIMS, first, string.format('%d:%d:%s:%s', first, n, claimed_ms, node))
  local oldest = redis.call('ZRANGE', CLAIMED, 0, 0, 'WITHSCORES')[2]
  if oldest then
    local call = redis.call('ZREVRANGEBYSCORE', CLAIMS, oldest, '-inf', 'WITHSCORES', 'LIMIT', 0, 1)[2]
    if call then redis.call('ZREMRANGEBYSCORE', CLAIMS, '-inf', '(' .. call) end
  end
end
-- When the delivery under claim token `tok` (a string) was claimed and by which node, from
-- CLAIMS: `claimed ms, node`, or nil when its call is no longer recorded.
local function claim_of(tok)
  local call = redis.call('ZREVRANGEBYSCORE', CLAIMS, tok, '-inf', 'LIMIT', 0, 1)[1]
  if not call then return nil end
  local first, n, ms, node = string.match(call, '^(%d+):(%d+):(%d+):(.*)$')
  if not first or tonumber(tok) >= tonumber(first) + tonumber(n) then return nil end
  return ms, node
end
