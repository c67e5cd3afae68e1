--[[
  complete.lua: move active jobs held by the caller to completed (or
  delete them, per their removeOnComplete), each optionally taking the next
  job in the same call. The Go side puts the completions of concurrent
  callers into one call; each runs exactly as a call of its own would, in
  order, and the calls share the script's fixed costs (the round trip, the
  server clock and meta reads).

  The completions' events are added uncapped and the events stream is
  capped once, after them (XTRIM MAXLEN ~, as BullMQ caps it once per
  completion): the cap on each XADD cost more than the trim.

  The job id is left in BullMQ's stalled set (KEYS[12]), unlike fail.lua:
  BullMQ's stalled check only acts on ids it can still remove from the
  active list, so a completed id there is inert until that check deletes
  the set, and the completion saves a command.

  KEYS[1..14] the queue keys, see lib.lua
  ARGV[1]     job key prefix
  ARGV[2]     lock TTL in milliseconds for the next jobs
  ARGV[3]     worker name for the next jobs ("" for none)
  ARGV[4..]   four per completion: job id; lock token the job was taken
              with; return value, JSON text; lock token for the next job,
              "" to take none

  Returns the server time in milliseconds, then six values per
  completion, in order, flat (one table per completion would cost the
  server a table's worth of reply probes per job). The first of the five
  is -1 no such job, -2 lock missing, -6 lock held by another token, -3 job
  not active, or an error reply when the completion raised one, and the
  other five are then nil. Otherwise the six are lib.lua's fetchReply
  (jobId "" when no next job was taken or none was asked for).
]]
local k = K()
local prefix, lockMs, worker = ARGV[1], ARGV[2], ARGV[3]
local now, nowS = nowMs()
local delayedHead = {} -- shared by the takes of this call, see fetchReply

local function completeOne(jobId, token, value, nextToken)
  local jobKey = prefix .. jobId
  -- The attributes finish() needs, read first: a hash without any of them
  -- is checked for existence separately.
  local attrs = rcall("HMGET", jobKey, "opts", "deid", "atm")
  if not (attrs[1] or attrs[2] or attrs[3]) and rcall("EXISTS", jobKey) == 0 then return -1 end
  local lockErr = checkLock(jobKey, token)
  if lockErr < 0 then return lockErr end
  if rcall("LREM", k.active, "-1", jobId) == 0 then return -3 end
  rcall("DEL", jobKey .. ":lock")
  -- Events go uncapped; the stream is capped once, after the completions.
  finish(k, prefix, now, false, jobId, jobKey, "completed", "returnvalue", value, attrs, nowS)
  wakeIfFreed(k)
  if nextToken ~= "" then
    -- No marker re-arm (takeNext's rearm): this call consumed no wake-up.
    return fetchReply(k, prefix, now, false, nextToken, lockMs, worker, false, nowS, delayedHead)
  end
  return "", false, false, false, false, false
end

-- An error (a command refused, junk a peer wrote) ends only its own
-- completion, as it would end a call of its own: its reply is the error.
local out, n = { now }, 1
for i = 4, #ARGV - 3, 4 do
  local ok, id, wait, vals, sched, ats, dropped = pcall(completeOne, ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3])
  if not ok then
    if type(id) ~= "table" or not id.err then id = { err = tostring(id) } end
    delayedHead.known = false -- it may have stopped halfway through a change
  end
  out[n + 1], out[n + 2], out[n + 3] = id, wait or false, vals or false
  out[n + 4], out[n + 5], out[n + 6] = sched or false, ats or false, dropped or false
  n = n + 6
end
rcall("XTRIM", k.events, "MAXLEN", "~", maxEvents(k))
return out
