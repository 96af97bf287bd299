-- HMGET of many fields at once, in runs of 4,000: one list of the values (false where a field is
-- missing), in the order of `fields`.
local function hmget_all(key, fields)
  if #fields == 0 then return {} end
  if #fields <= 4000 then return redis.call('HMGET', key, unpack(fields)) end
  local out = {}
  for i = 1, #fields, 4000 do
    local part = redis.call('HMGET', key, unpack(fields, i, math.min(i + 3999, #fields)))
    for j = 1, #part do out[#out + 1] = part[j] end
  end
  return out
end
