--[[
  pause.lua: pause or resume the queue as BullMQ does: the meta "paused"
  field is the flag BullMQ's isPaused() reads; ready jobs move between the
  wait and paused lists; the marker is dropped on pause (nobody wakes) and
  re-armed on resume.

  KEYS[1..14] the queue keys, see lib.lua
  ARGV[1]     job key prefix (unused; kept for the common layout)
  ARGV[2]     "pause" or "resume"

  Returns 1.
]]
local k = K()
local from, to = k.wait, k.paused
if ARGV[2] ~= "pause" then from, to = k.paused, k.wait end
local hasJobs = rcall("EXISTS", from) == 1
if hasJobs then
  if rcall("EXISTS", to) == 0 then
    rcall("RENAME", from, to)
  else
    -- Both lists hold jobs (a peer raced us): append ours on the old side.
    local ids = rcall("LRANGE", from, 0, -1)
    for i = 1, #ids, 5000 do
      rcall("RPUSH", to, unpack(ids, i, math.min(i + 4999, #ids)))
    end
    rcall("DEL", from)
  end
end
local maxLen = maxEvents(k)
if ARGV[2] == "pause" then
  rcall("HSET", k.meta, "paused", 1)
  rcall("DEL", k.marker)
  emit(k, maxLen, "paused")
else
  rcall("HDEL", k.meta, "paused")
  if hasJobs or rcall("ZCARD", k.prioritized) > 0 then
    rcall("ZADD", k.marker, 0, "0")
  else
    delayMarker(k)
  end
  emit(k, maxLen, "resumed")
end
return 1
