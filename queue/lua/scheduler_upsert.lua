--[[
  scheduler_upsert.lua: create or replace a job scheduler and its one
  pending run. A pending run that is not yet taken (delayed, ready or
  prioritized) is deleted and the new one is created at ARGV[3]; a run that
  is active stays and finishes.

  KEYS[1..14] the queue keys, see lib.lua
  KEYS[15]    the scheduler hash ("<repeat>:<schedulerId>")
  ARGV[1]     job key prefix
  ARGV[2]     scheduler id
  ARGV[3]     millis of the first run (computed by the caller from the
              pattern and the server time)
  ARGV[4]     millis of the run after it, stored as "nx" so that taking the
              first run can create the second in the same call
  ARGV[5]     job name
  ARGV[6]     job data template, JSON text
  ARGV[7]     job options template, JSON text in BullMQ's encoding
  ARGV[8]     cron pattern
  ARGV[9]     IANA time zone, or ""
  ARGV[10]    repeat.limit (most runs), or ""
  ARGV[11]    startDate, millis, or ""
  ARGV[12]    endDate, millis, or ""

  Returns the pending job id, or -10 when a job with that id exists already
  (the caller moves to the next run time).
]]
local k = K()
local prefix, sid = ARGV[1], ARGV[2]
local first, after = tonumber(ARGV[3]), tonumber(ARGV[4])
local sk = KEYS[15]
local now = nowMs()
local maxLen = maxEvents(k)

local prev = rcall("ZSCORE", k.repeatKey, sid)
if prev then
  local prevId = "repeat:" .. sid .. ":" .. prev
  local removed = rcall("ZREM", k.delayed, prevId) + rcall("ZREM", k.prioritized, prevId)
  if removed == 0 then
    removed = rcall("LREM", k.wait, 0, prevId) + rcall("LREM", k.paused, 0, prevId)
  end
  if removed > 0 then
    removeJobKeys(prefix .. prevId)
    emit(k, maxLen, "removed", "jobId", prevId, "prev", "scheduler-upsert")
  end
end

if rcall("EXISTS", prefix .. "repeat:" .. sid .. ":" .. ARGV[3]) == 1 then return -10 end

local ic = tonumber(rcall("HGET", sk, "ic")) or 1
rcall("DEL", sk)
local fields = { "name", ARGV[5], "pattern", ARGV[8], "ic", ic, "nx", after }
if ARGV[9] ~= "" then
  fields[#fields + 1] = "tz"
  fields[#fields + 1] = ARGV[9]
end
-- BullMQ's scheduler hash fields for the bounds, kept as the caller wrote them.
local bounds = {}
for i, key in ipairs({ "limit", "startDate", "endDate" }) do
  local v = ARGV[9 + i]
  if v ~= "" then
    bounds[key] = tonumber(v)
    fields[#fields + 1] = key
    fields[#fields + 1] = v
  end
end
if ARGV[6] ~= "{}" then
  fields[#fields + 1] = "data"
  fields[#fields + 1] = ARGV[6]
end
if ARGV[7] ~= "{}" then
  fields[#fields + 1] = "opts"
  fields[#fields + 1] = ARGV[7]
end
rcall("HSET", sk, unpack(fields))
rcall("ZADD", k.repeatKey, first, sid)
local tz = nil
if ARGV[9] ~= "" then tz = ARGV[9] end
return createSchedulerJob(k, prefix, now, maxLen, sid, ARGV[3], {
  name = ARGV[5], data = ARGV[6], opts = ARGV[7], pattern = ARGV[8], tz = tz, ic = ic,
  limit = bounds.limit, startDate = bounds.startDate, endDate = bounds.endDate,
})
