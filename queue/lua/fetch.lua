--[[
  fetch.lua: promote due delayed jobs, then move the next ready job to
  active under a lock and return it (one call per take).

  KEYS[1..14] the queue keys (wait, active, paused, delayed, prioritized,
              completed, failed, meta, events, marker, pc, stalled, repeat,
              id), see lib.lua
  ARGV[1]     job key prefix ("bull:<queue>:")
  ARGV[2]     lock token
  ARGV[3]     lock TTL in milliseconds
  ARGV[4]     worker name recorded as processedBy ("pb"), "" for none

  Returns { nowMs, then lib.lua's fetchReply: jobId or "",
  msUntilNextDelayed or nil, {job hash fields as read before the take,
  names numbered by lib.lua's jobFieldIndex} or nil, {scheduler request} or
  nil, attempts started or nil, {dropped id, why, ...} or nil }.
]]
local k = K()
metaReadOnly = true
local now, nowS = nowMs()
return { now, fetchReply(k, ARGV[1], now, maxEvents(k), ARGV[2], ARGV[3], ARGV[4], true, nowS) }
