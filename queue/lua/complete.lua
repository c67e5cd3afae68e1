--[[
  complete.lua: move an active job held by the caller to completed (or
  delete it, per its removeOnComplete), optionally taking the next job in the
  same call.

  KEYS[1..14] the queue keys, see lib.lua
  ARGV[1]     job key prefix
  ARGV[2]     job id
  ARGV[3]     lock token the job was taken with
  ARGV[4]     return value, JSON text
  ARGV[5]     "1" to take the next job in the same call, else "0"
  ARGV[6]     lock token for the next job
  ARGV[7]     lock TTL in milliseconds for the next job
  ARGV[8]     worker name for the next job ("" for none)

  Returns -1 no such job, -2 lock missing, -6 lock held by another token,
  -3 job not active; otherwise the fetch reply of lib.lua (jobId "" when no
  next job was taken or none was asked for).
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
local maxLen = maxEvents(k)
finish(k, prefix, now, maxLen, jobId, jobKey, "completed", "returnvalue", ARGV[4])
wakeIfFreed(k)
if ARGV[5] == "1" then
  return fetchReply(k, prefix, now, maxLen, ARGV[6], tonumber(ARGV[7]), ARGV[8])
end
return { "", now, -1, {}, {} }
