--[[ Reads one task: pending or dead, with its state.

  Input:
    KEYS     the wheel's keys
    ARGV[1]  key
  Output:
    {} when there is no such task; else {state, due ms, deliveries, last error, payload, Redis's
    clock in ms, the task's own retry settings ('' for the node's; see record.lua), then its
    series as record.lua keeps it: period ms, runs left, missed-run digit, spec} with state
    'waiting', 'ready', 'running' or 'dead' (a task whose lease ran out is 'ready': the next tick
    hands it out again). A dead letter keeps no series: '0', '0', '0', ''.
  Keys: TASKS, READY, LEASED, DEAD_TASKS.
]]
-- @include keys
-- @include clock
-- @include record
-- @include claims
local k = ARGV[1]
local now = clock()

local rec = redis.call('HGET', TASKS, k)
if rec then
  local t = decode(rec)
  local state = 'waiting'
  if t.tok ~= '0' then
    state = 'ready'
    if lease_end(t.tok) > now then state = 'running' end
  elseif redis.call('ZSCORE', READY, k) then
    state = 'ready'
  end
  return {
    state, tostring(t.due), tostring(t.a), t.err, t.p, string.format('%d', now), t.retry,
    string.format('%d', t.every), string.format('%d', t.runs), t.missed, t.spec,
  }
end
local dead = redis.call('HGET', DEAD_TASKS, k)
if not dead then return {} end
local d = decode_dead(dead)
return {'dead', d.due, d.a, d.err, d.p, string.format('%d', now), d.retry, '0', '0', '0', ''}
