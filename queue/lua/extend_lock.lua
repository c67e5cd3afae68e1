--[[
  extend_lock.lua: extend the lock of a job the caller holds.

  KEYS[1..14] the queue keys, see lib.lua
  ARGV[1]     job key prefix
  ARGV[2]     job id
  ARGV[3]     lock token the job was taken with
  ARGV[4]     new lock TTL in milliseconds

  Returns 0 ok, -2 lock missing, -6 lock held by another token.
]]
local k = K()
local jobKey = ARGV[1] .. ARGV[2]
local lockErr = checkLock(jobKey, ARGV[3])
if lockErr < 0 then return lockErr end
rcall("SET", jobKey .. ":lock", ARGV[3], "PX", tonumber(ARGV[4]))
rcall("SREM", k.stalled, ARGV[2])
return 0
