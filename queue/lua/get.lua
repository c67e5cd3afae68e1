--[[
  get.lua: read a job's hash and its state in one call (read only).

  KEYS[1..14] the queue keys, see lib.lua
  ARGV[1]     job key prefix
  ARGV[2]     job id

  Returns 0 when the job does not exist, else { {job hash fields}, state }
  with state one of completed, failed, delayed, prioritized, active,
  waiting, paused, waiting-children, unknown.
]]
local k = K()
local id = ARGV[2]
local fields = rcall("HGETALL", ARGV[1] .. id)
if #fields == 0 then return 0 end
local state = "unknown"
if rcall("ZSCORE", k.completed, id) then
  state = "completed"
elseif rcall("ZSCORE", k.failed, id) then
  state = "failed"
elseif rcall("ZSCORE", k.delayed, id) then
  state = "delayed"
elseif rcall("ZSCORE", k.prioritized, id) then
  state = "prioritized"
elseif rcall("LPOS", k.active, id) then
  state = "active"
elseif rcall("LPOS", k.wait, id) then
  state = "waiting"
elseif rcall("LPOS", k.paused, id) then
  state = "paused"
elseif rcall("ZSCORE", ARGV[1] .. "waiting-children", id) then
  state = "waiting-children"
end
return { fields, state }
