--[[
  schedulers.lua: list job schedulers with their definitions in one call
  (read only).

  KEYS[1..14] the queue keys, see lib.lua
  ARGV[1]     job key prefix (unused; kept for the common layout)

  Returns { schedulerId, millis of its pending run, {scheduler hash
  fields}, ... } in id order; ids without a hash (BullMQ's legacy
  repeatable jobs) are left out.
]]
local k = K()
local out = {}
local ids = rcall("ZRANGE", k.repeatKey, 0, -1, "WITHSCORES")
for i = 1, #ids, 2 do
  local fields = rcall("HGETALL", k.repeatKey .. ":" .. ids[i])
  if #fields > 0 then
    out[#out + 1] = ids[i]
    out[#out + 1] = ids[i + 1]
    out[#out + 1] = fields
  end
end
return out
