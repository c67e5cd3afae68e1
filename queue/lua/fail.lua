--[[
  fail.lua: record a failed attempt of an active job held by the caller.
  While attempts remain (attemptsMade + 1 < opts.attempts) and retry is
  allowed, the job is retried: to delayed after its backoff, or straight
  back to ready when the backoff is 0. Otherwise it moves to failed (or is
  deleted, per its removeOnFail). Either way attemptsMade ("atm") grows by
  one and failedReason is recorded, and the reason is appended to the
  job's "stacktrace" (a JSON array of strings, as BullMQ keeps one stack
  per failed attempt), keeping the last opts.stackTraceLimit entries
  (default 10; 0 keeps none).

  KEYS[1..14] the queue keys, see lib.lua
  ARGV[1]     job key prefix
  ARGV[2]     job id
  ARGV[3]     lock token the job was taken with
  ARGV[4]     failure reason
  ARGV[5]     "1" to fail without retrying, "2" to retry at once without
              using an attempt (opts.attempts grows with attemptsMade),
              else "0"
  ARGV[6]     random number in [0, 1) for backoff jitter

  Returns -1 no such job, -2 lock missing, -6 lock held by another token,
  -3 job not active; otherwise { retried (1 or 0), backoff ms }.
]]
local k = K()
local prefix, jobId, token, reason = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local jobKey = prefix .. jobId
if rcall("EXISTS", jobKey) == 0 then return -1 end
local lockErr = checkLock(jobKey, token)
if lockErr < 0 then return lockErr end
if rcall("LREM", k.active, -1, jobId) == 0 then return -3 end
rcall("DEL", jobKey .. ":lock")
rcall("SREM", k.stalled, jobId)
local now = nowMs()
local maxLen = maxEvents(k)

-- backoffMs follows BullMQ's built-in strategies: fixed = delay, exponential
-- = round(2^(attemptsMade-1) * delay), each with optional jitter. A bare
-- number is a fixed delay; an unknown type is treated as fixed.
local function backoffMs(b, attemptsMade, rnd)
  local typ, delay, jitter = "fixed", 0, 0
  if type(b) == "number" then
    delay = b
  elseif type(b) == "table" then
    typ = b["type"]
    delay = num(b["delay"], 0)
    jitter = num(b["jitter"], 0)
  else
    return 0
  end
  if delay <= 0 then return 0 end
  local d = delay
  if typ == "exponential" then d = math.floor(2 ^ (attemptsMade - 1) * delay + 0.5) end
  if jitter > 0 and jitter <= 1 then
    d = math.floor(rnd * d * jitter + d * (1 - jitter))
  end
  return d
end

-- stacktraceWith returns the job's stacktrace JSON with reason appended,
-- bounded to the last `limit` entries; junk a peer wrote starts afresh.
local function stacktraceWith(raw, reason, limit)
  local traces = {}
  if limit > 0 and type(raw) == "string" and raw ~= "" then
    local ok, v = pcall(cjson.decode, raw)
    if ok and type(v) == "table" then
      for _, t in ipairs(v) do
        if type(t) == "string" then traces[#traces + 1] = t end
      end
    end
  end
  if limit > 0 then traces[#traces + 1] = reason end
  local from = math.max(1, #traces - limit + 1)
  local kept = {}
  for i = from, #traces do kept[#kept + 1] = traces[i] end
  if #kept == 0 then return "[]" end
  return cjson.encode(kept)
end

local f = rcall("HMGET", jobKey, "opts", "atm", "priority", "stacktrace")
local opts = decodeJSON(f[1])
local made = math.floor(num(f[2], 0)) + 1
local attempts = num(opts["attempts"], 0)
local limit = math.floor(num(opts["stackTraceLimit"], 10))
if limit < 0 then limit = 10 end
rcall("HSET", jobKey, "stacktrace", stacktraceWith(f[4], reason, limit))
local free = ARGV[5] == "2"
if free then
  opts["attempts"] = math.max(attempts, 1) + 1
  attempts = opts["attempts"]
  rcall("HSET", jobKey, "opts", cjson.encode(opts))
end
if ARGV[5] ~= "1" and made < attempts then
  local delay = backoffMs(opts["backoff"], made, num(ARGV[6], 0))
  if free then delay = 0 end
  incrField(jobKey, "atm")
  rcall("HSET", jobKey, "failedReason", reason)
  if delay > 0 then
    rcall("HSET", jobKey, "delay", delay)
    addDelayed(k, jobId, now + delay, maxLen)
    wakeIfFreed(k)
  else
    local pushCmd = "LPUSH"
    if opts["lifo"] == true then pushCmd = "RPUSH" end
    enqueue(k, jobId, math.floor(num(f[3], 0)), pushCmd)
    emit(k, maxLen, "waiting", "jobId", jobId, "prev", "active")
  end
  return { 1, delay }
end
finish(k, prefix, now, maxLen, jobId, jobKey, "failed", "failedReason", reason)
wakeIfFreed(k)
return { 0, 0 }
