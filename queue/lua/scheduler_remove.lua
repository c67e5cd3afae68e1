--[[
  scheduler_remove.lua: delete a job scheduler and its pending run when
  that run is not yet taken (a run already active finishes normally).

  KEYS[1..14] the queue keys, see lib.lua
  KEYS[15]    the scheduler hash ("<repeat>:<schedulerId>")
  ARGV[1]     job key prefix
  ARGV[2]     scheduler id

  Returns 1 when the scheduler existed, else 0.
]]
local k = K()
local prefix, sid = ARGV[1], ARGV[2]
local cur = rcall("ZSCORE", k.repeatKey, sid)
if cur then
  local id = "repeat:" .. sid .. ":" .. cur
  local removed = rcall("ZREM", k.delayed, id) + rcall("ZREM", k.prioritized, id)
  if removed == 0 then
    removed = rcall("LREM", k.wait, 0, id) + rcall("LREM", k.paused, 0, id)
  end
  if removed > 0 then
    removeJobKeys(prefix .. id)
    emit(k, maxEvents(k), "removed", "jobId", id, "prev", "scheduler-remove")
  end
end
local existed = rcall("ZREM", k.repeatKey, sid) + rcall("DEL", KEYS[15])
if existed > 0 then return 1 end
return 0
