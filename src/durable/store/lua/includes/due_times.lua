-- The due times in ms of a call's tasks: `packed` holds their milliseconds (a MessagePack array,
-- see scripts::packed), `modes` says what each is: 'd' a delay from Redis's now `up`, 'a' a time
-- on Redis's clock; one letter for all of them, or one per task.
local function due_times(packed, modes, up)
  local ms = cmsgpack.unpack(packed)
  if modes == 'a' then return ms end
  local all = modes == 'd'
  for j = 1, #ms do
    if all or string.sub(modes, j, j) == 'd' then ms[j] = up + ms[j] end
  end
  return ms
end
