--[[
  remove.lua: delete a job that no consumer holds, from whichever state it
  is in, with its dedup key when that still points at it.

  KEYS[1..14] the queue keys, see lib.lua
  ARGV[1]     job key prefix
  ARGV[2]     job id

  Returns 1 removed, 0 no such job, -4 locked by a consumer, -8 it is its
  scheduler's pending run (remove the scheduler instead).
]]
local k = K()
local prefix, id = ARGV[1], ARGV[2]
local jobKey = prefix .. id
local f = rcall("HMGET", jobKey, "name", "rjk", "deid")
if not f[1] and rcall("EXISTS", jobKey) == 0 then return 0 end
if rcall("EXISTS", jobKey .. ":lock") == 1 then return -4 end
if f[2] then
  local cur = rcall("ZSCORE", k.repeatKey, f[2])
  if cur and id == ("repeat:" .. f[2] .. ":" .. cur) then return -8 end
end
local prev = "unknown"
if rcall("ZREM", k.completed, id) == 1 then prev = "completed"
elseif rcall("ZREM", k.failed, id) == 1 then prev = "failed"
elseif rcall("ZREM", k.delayed, id) == 1 then prev = "delayed"
elseif rcall("ZREM", k.prioritized, id) == 1 then prev = "prioritized"
elseif rcall("LREM", k.wait, 0, id) > 0 then prev = "wait"
elseif rcall("LREM", k.paused, 0, id) > 0 then prev = "paused"
elseif rcall("LREM", k.active, 0, id) > 0 then prev = "active"
end
rcall("SREM", k.stalled, id)
if f[3] then
  local dk = prefix .. "de:" .. f[3]
  if rcall("GET", dk) == id then rcall("DEL", dk) end
end
removeJobKeys(jobKey)
emit(k, maxEvents(k), "removed", "jobId", id, "prev", prev)
return 1
