-- Redis's clock in whole milliseconds, rounded up: the base of due times and lease expiries, so
-- they are never before `delay` (or `lease`) after the call reached Redis.
local function now_up()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.ceil(tonumber(t[2]) / 1000)
end
