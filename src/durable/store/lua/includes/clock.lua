-- Redis's clock in whole milliseconds, read once per call: `down` rounded down, `up` rounded up.
-- Deciding that a time has come rounds down (never early); setting a time to come (a due time, a
-- lease's end) rounds up, so it is never before `delay` after the call reached Redis.
local function clock()
  local t = redis.call('TIME')
  local s, us = tonumber(t[1]) * 1000, tonumber(t[2])
  return s + math.floor(us / 1000), s + math.ceil(us / 1000)
end
