-- Hash commands over many fields at once, in runs of 4,000 values (well within what Lua passes to
-- one call). `hmget_all` gives one list of the values (false where a field is missing), in the
-- order of `fields`; `hset_all` writes a flat list of field, value pairs (from index `from`, 1
-- if not given, to its end); `records_of` takes
-- every `step`-th entry of `list` from `from` on as task keys and reads their records in TASKS.
-- @include keys
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
local function hset_all(key, pairs, from)
  for i = from or 1, #pairs, 4000 do redis.call('HSET', key, unpack(pairs, i, math.min(i + 3999, #pairs))) end
end
local function records_of(list, from, step)
  local names, n = {}, 0
  for i = from, #list, step do
    n = n + 1
    names[n] = list[i]
  end
  return names, hmget_all(TASKS, names)
end
