--[[
  scheduler_advance.lua: after a consumer took a scheduler's run, record
  the cron times the caller computed. Nothing happens unless the
  scheduler's current run is still the one the caller saw (ARGV[3]), so
  racing consumers and a removed scheduler are harmless.

  KEYS[1..14] the queue keys, see lib.lua
  KEYS[15]    the scheduler hash ("<repeat>:<schedulerId>")
  ARGV[1]     job key prefix
  ARGV[2]     scheduler id
  ARGV[3]     millis of the run the caller saw as current
  ARGV[4]     millis of the run to create now, or "" when the run already
              exists and only the next time is missing
  ARGV[5]     millis of the run after that, stored as "nx"

  Returns 1 when recorded, 0 when the scheduler moved on or is gone, or
  its schedule ended (repeat.limit reached, endDate passed).
]]
local k = K()
local prefix, sid = ARGV[1], ARGV[2]
local cur = rcall("ZSCORE", k.repeatKey, sid)
if not cur or tonumber(cur) ~= tonumber(ARGV[3]) then return 0 end
local sk = KEYS[15]
if ARGV[4] ~= "" then
  local s = schedulerFields(k, sid)
  if not s then return 0 end
  local now = nowMs()
  -- The run taken is the current one; its limit and endDate decide.
  if not schedulerMayRun(prefix, now, "repeat:" .. sid .. ":" .. ARGV[3], s) or
      not schedulerBefore(s, ARGV[4]) then
    return 0
  end
  s.ic = incrField(sk, "ic")
  -- A job already at that id (a peer created it) is adopted as the run.
  createSchedulerJob(k, prefix, now, maxEvents(k), sid, ARGV[4], s)
  rcall("ZADD", k.repeatKey, ARGV[4], sid)
end
rcall("HSET", sk, "nx", ARGV[5])
return 1
