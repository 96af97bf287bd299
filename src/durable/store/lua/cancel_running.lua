--[[ Asks the worker that runs a task to cancel it: records the request in CANCELLING (the task's
  key, the running delivery's claim token) and adds it to the stream CANCELS, which every worker
  reads, so that the handler's cancellation token is cancelled at once. The task stays leased
  to its worker until the handler's outcome lands: then it ends as cancelled (cancelled.lua),
  whatever the outcome, neither retried nor buried.

  Only a running task is asked: claimed (a claim token set) under a lease that has not run out.
  Safe to retry: a repeated request records and sends the same again.

  Input:
    KEYS     the wheel's keys
    ARGV[1]  key
  Output:
    1 if the task was running and its cancel is requested, 0 if it was not running (nothing
    changed).
  Keys: TASKS, LEASED, CANCELLING, CANCELS.
]]
-- @include keys
-- @include clock
-- @include record
-- @include claims
local k = ARGV[1]

local rec = redis.call('HGET', TASKS, k)
if not rec then return 0 end
local tok = token_of(rec)
if lease_end(tok) <= clock() then return 0 end
redis.call('HSET', CANCELLING, k, tok)
redis.call('XADD', CANCELS, 'MAXLEN', '~', 1000, '*', 'key', k, 'token', tok)
return 1
