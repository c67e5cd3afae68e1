--[[
  add.lua: add a job: ready (wait; the paused list while paused in BullMQ
  5's layout), prioritized, or delayed. A custom id that already exists is
  not added again; a dedup id whose key is live is not added again either.

  KEYS[1..14] the queue keys, see lib.lua
  KEYS[15]    dedup key ("<prefix>de:<dedupId>"), present only with ARGV[8]
  ARGV[1]     job key prefix
  ARGV[2]     custom job id, or "" to number the job from the id counter
  ARGV[3]     job name
  ARGV[4]     job data, JSON text
  ARGV[5]     job options, JSON text in BullMQ's encoding
  ARGV[6]     delay in milliseconds (0: ready now)
  ARGV[7]     priority (0: none)
  ARGV[8]     dedup id, or ""
  ARGV[9]     dedup TTL in milliseconds (0: until the job finishes; -1:
              until the job finishes, in BullMQ's keepLastIfActive mode: a
              job refused while the holder is active is kept at
              "<prefix>dn:<dedupId>", replacing one kept before, and added
              when the holder finishes, see lib.lua's requeueDedupNext)

  Returns { jobId, status }: status 1 added; 0 a job with this id exists
  (jobId is it); 2 deduplicated (jobId is the job holding the dedup id; in
  keep-last mode the job may have been kept for later).
]]
local k = K()
local prefix, customId, name, data, opts = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local delay = tonumber(ARGV[6])
local priority = tonumber(ARGV[7])
local dedupId, dedupTTL = ARGV[8], tonumber(ARGV[9])
local maxLen = maxEvents(k)

local jobId = customId
if jobId == "" then
  jobId = tostring(rcall("INCR", k.id))
elseif rcall("EXISTS", prefix .. jobId) == 1 then
  emit(k, maxLen, "duplicated", "jobId", jobId)
  return { jobId, 0 }
end

if dedupId ~= "" then
  local set
  if dedupTTL < 0 then
    set = rcall("SET", KEYS[15], jobId, "NX")
  elseif dedupTTL > 0 then
    set = rcall("SET", KEYS[15], jobId, "PX", dedupTTL, "NX")
  else
    set = rcall("SET", KEYS[15], jobId, "NX")
  end
  if not set then
    local holder = rcall("GET", KEYS[15]) or ""
    if dedupTTL < 0 and holder ~= "" and rcall("LPOS", k.active, holder) then
      -- BullMQ's storeDeduplicatedNextJob: the fields requeueDedupNext reads.
      local nextKey = prefix .. "dn:" .. dedupId
      rcall("DEL", nextKey)
      rcall("HSET", nextKey, "name", name, "data", data, "opts", opts, "jid", jobId)
      rcall("PERSIST", KEYS[15])
    end
    emit(k, maxLen, "deduplicated", "jobId", holder, "deduplicationId", dedupId,
      "deduplicatedJobId", jobId)
    return { holder, 2 }
  end
end

local now, nowS = nowMs()
local jobKey = prefix .. jobId
-- ARGV[6] and ARGV[7] are integers as the caller wrote them: stored as
-- given, so the server does not format them again.
if dedupId ~= "" then
  rcall("HSET", jobKey, "name", name, "data", data, "opts", opts, "timestamp", nowS,
    "delay", ARGV[6], "priority", ARGV[7], "deid", dedupId)
else
  rcall("HSET", jobKey, "name", name, "data", data, "opts", opts, "timestamp", nowS,
    "delay", ARGV[6], "priority", ARGV[7])
end
emit(k, maxLen, "added", "jobId", jobId, "name", name)
if delay > 0 then
  addDelayed(k, jobId, now + delay, maxLen)
else
  enqueue(k, jobId, priority, "LPUSH")
  emit(k, maxLen, "waiting", "jobId", jobId)
end
return { jobId, 1 }
