--[[
  stalled.lua: find active jobs whose lock has expired (the consumer died
  or stopped renewing) and deal with each in one pass. A job whose stalled
  count ("stc", after this stall) exceeds the maximum is failed with reason
  "stalled" (or deleted, per its removeOnFail); others go back to the front
  of the ready list to run again.

  KEYS[1..14] the queue keys, see lib.lua
  ARGV[1]     job key prefix
  ARGV[2]     max stalled count (0: the first stall fails the job)

  Returns { {failed job ids}, {requeued job ids} }.
]]
local k = K()
local prefix = ARGV[1]
local maxStalled = tonumber(ARGV[2])
local failed, requeued = {}, {}
local active = rcall("LRANGE", k.active, 0, -1)
if #active == 0 then return { failed, requeued } end
local now = nowMs()
local maxLen = maxEvents(k)
for _, id in ipairs(active) do
  local jobKey = prefix .. id
  if rcall("EXISTS", jobKey .. ":lock") == 0 then
    if rcall("EXISTS", jobKey) == 0 or string.sub(id, 1, 2) == "0:" then
      rcall("LREM", k.active, -1, id)
    elseif rcall("LREM", k.active, -1, id) > 0 then
      rcall("SREM", k.stalled, id)
      local stc = incrField(jobKey, "stc")
      emit(k, maxLen, "stalled", "jobId", id)
      if stc > maxStalled then
        finish(k, prefix, now, maxLen, id, jobKey, "failed", "failedReason", "stalled")
        failed[#failed + 1] = id
        wakeIfFreed(k)
      else
        local paused, maxed = blocked(k)
        rcall("RPUSH", readyList(k, paused), id)
        if not paused and not maxed then rcall("ZADD", k.marker, 0, "0") end
        emit(k, maxLen, "waiting", "jobId", id, "prev", "active")
        requeued[#requeued + 1] = id
      end
    end
  end
end
return { failed, requeued }
