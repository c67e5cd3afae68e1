--[[
  defer.lua: move an active job held by the caller to delayed for a while.
  A deferral is not an attempt: attemptsMade is unchanged.

  KEYS[1..14] the queue keys, see lib.lua
  ARGV[1]     job key prefix
  ARGV[2]     job id
  ARGV[3]     lock token the job was taken with
  ARGV[4]     delay in milliseconds (>= 0), counted from the server's now
  ARGV[5]     a note kept on the job as "pigw" (its waits in the worker's
              gates); "" keeps the one there

  Returns 0 ok, -1 no such job, -2 lock missing, -6 lock held by another
  token, -3 job not active.
]]
local k = K()
local prefix, jobId, token = ARGV[1], ARGV[2], ARGV[3]
local jobKey = prefix .. jobId
if rcall("EXISTS", jobKey) == 0 then return -1 end
local lockErr = checkLock(jobKey, token)
if lockErr < 0 then return lockErr end
if rcall("LREM", k.active, -1, jobId) == 0 then return -3 end
rcall("DEL", jobKey .. ":lock")
rcall("SREM", k.stalled, jobId)
local now = nowMs()
local delay = math.floor(tonumber(ARGV[4]))
rcall("HSET", jobKey, "delay", delay)
if ARGV[5] and ARGV[5] ~= "" then rcall("HSET", jobKey, "pigw", ARGV[5]) end
addDelayed(k, jobId, now + delay, maxEvents(k))
wakeIfFreed(k)
return 0
