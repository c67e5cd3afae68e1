--[[
  pause.lua: pause or resume the queue as the BullMQ version of its layout
  does (lib.lua's meta: the meta "version" field, or Config.Layout). The
  meta "paused" field is the flag BullMQ's isPaused() and every consumer
  read; the marker is dropped on pause (nobody wakes) and re-armed on
  resume when jobs are ready.

  BullMQ 6: ready jobs stay in wait, in order. A resume moves what a BullMQ
  5 client or an older pidispatch left in the paused list back to wait,
  ahead of the jobs there (they are older), as BullMQ 6's resume does.
  BullMQ 5: ready jobs move between the wait and paused lists.

  KEYS[1..14] the queue keys, see lib.lua
  ARGV[1]     job key prefix (unused; kept for the common layout)
  ARGV[2]     "pause" or "resume"

  Returns 1.
]]
local k = K()
local m = meta(k)
local pausing = ARGV[2] == "pause"

if m.legacy then
  if pausing then moveAll(k.wait, k.paused) else moveAll(k.paused, k.wait) end
elseif not pausing then
  moveAll(k.paused, k.wait)
end
if pausing then
  rcall("HSET", k.meta, "paused", 1)
  rcall("DEL", k.marker)
  emit(k, m.maxLen, "paused")
else
  rcall("HDEL", k.meta, "paused")
  -- wait, not only what moved: jobs added while paused wait there in
  -- BullMQ 6's layout, and consumers sleep until the marker says so.
  if rcall("LLEN", k.wait) > 0 or rcall("ZCARD", k.prioritized) > 0 then
    rcall("ZADD", k.marker, 0, "0")
  else
    delayMarker(k)
  end
  emit(k, m.maxLen, "resumed")
end
return 1
