-- Redis's clock in whole milliseconds, rounded down: the only clock the wheel uses. Deciding
-- that a time has come rounds down (never early); setting a time to come rounds up (now_up).
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
