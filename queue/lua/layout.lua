--[[
  layout.lua: read the BullMQ layout the queue follows (lib.lua's meta: its
  meta "version", else Config.Layout, written there now), or move the queue
  to another layout: the meta "version" becomes "pidispatch:bullmq<n>", and
  a paused queue's ready jobs move to where that layout keeps them (6: the
  wait list; 5: the paused list), in order, in this one call.

  KEYS[1..14] the queue keys, see lib.lua
  ARGV[1]     job key prefix (unused; kept for the common layout)
  ARGV[2]     "" to read, or the layout to set: "6" or "5"

  Returns the layout after the call: 6 or 5.
]]
local k = K()
local m = meta(k)
local cur = 6
if m.legacy then cur = 5 end
local want = tonumber(ARGV[2])
if not want or want == cur then return cur end
if m.paused then
  if want == 5 then moveAll(k.wait, k.paused) else moveAll(k.paused, k.wait) end
end
rcall("HSET", k.meta, "version", "pidispatch:bullmq" .. want)
return want
