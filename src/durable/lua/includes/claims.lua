-- The claims of the running tasks, for listing them (list.lua): CLAIMED holds their keys scored by
-- when they were claimed (ms on Redis's clock), HOLDERS each one's claim token and the id of the
-- worker's node that claimed it, as '<token>:<node>'. A claim writes both for its tasks
-- (claim.lua); whatever ends a lease (takes a task's entry out of LEASED) forgets its claim with
-- `forget_claims`. A HOLDERS entry whose token is not the record's is stale, and not shown.
-- Keys: CLAIMED, HOLDERS.
-- @include keys
-- @include zrem_all
local function forget_claims(names)
  zrem_all(CLAIMED, names)
  zrem_all(HOLDERS, names, 'HDEL')
end
-- Forgets the claims of the deliveries listed in `list` from `from` on (key, claim token) that
-- `answers` (one digit per delivery, as `acknowledge` answers) says were acknowledged.
local function forget_acknowledged(list, from, answers)
  local names = {}
  for j = 1, #answers do
    if string.sub(answers, j, j) == '1' then names[#names + 1] = list[from + 2 * j - 2] end
  end
  forget_claims(names)
end
