--[[
  scheduler_remove.lua: delete a job scheduler and every run of it that is
  not taken: its pending run, and runs a consumer took and put back
  (deferred), which are no longer the pending run but still carry the
  scheduler's id "repeat:<schedulerId>:<millis>". A run that is active
  finishes normally.

  KEYS[1..14] the queue keys, see lib.lua
  KEYS[15]    the scheduler hash ("<repeat>:<schedulerId>")
  ARGV[1]     job key prefix
  ARGV[2]     scheduler id

  Returns 1 when the scheduler existed, else 0.
]]
local k = K()
local prefix, sid = ARGV[1], ARGV[2]
local runPrefix = "repeat:" .. sid .. ":"
local maxLen = maxEvents(k)

local function drop(id)
  removeJobKeys(prefix .. id)
  emit(k, maxLen, "removed", "jobId", id, "prev", "scheduler-remove")
end

-- Sorted sets: scan for the run ids (the id may hold glob characters).
local pattern = string.gsub(runPrefix, "([%*%?%[%]\\])", "\\%1") .. "*"
for _, set in ipairs({ k.delayed, k.prioritized }) do
  local cursor = "0"
  repeat
    local page = rcall("ZSCAN", set, cursor, "MATCH", pattern, "COUNT", 1000)
    cursor = page[1]
    for i = 1, #page[2], 2 do
      local id = page[2][i]
      if rcall("ZREM", set, id) == 1 then drop(id) end
    end
  until cursor == "0"
end

-- Lists: read them in pages, then remove what matched.
for _, list in ipairs({ k.wait, k.paused }) do
  local found, n = {}, rcall("LLEN", list)
  for start = 0, n - 1, 1000 do
    for _, id in ipairs(rcall("LRANGE", list, start, start + 999)) do
      if string.sub(id, 1, #runPrefix) == runPrefix then found[#found + 1] = id end
    end
  end
  for _, id in ipairs(found) do
    if rcall("LREM", list, 0, id) > 0 then drop(id) end
  end
end

local existed = rcall("ZREM", k.repeatKey, sid) + rcall("DEL", KEYS[15])
if existed > 0 then return 1 end
return 0
