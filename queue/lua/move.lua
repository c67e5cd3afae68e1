--[[
  move.lua: move a job that no consumer holds from one queue to another,
  keeping its id, data, options, attempts and due time. Used to re-home jobs
  stranded on the queue of a host that is gone.

  KEYS[1..14]  the source queue's keys, see lib.lua
  KEYS[15..28] the target queue's keys, in the same order
  ARGV[1]      source job key prefix ("bull:<from>:")
  ARGV[2]      job id
  ARGV[3]      target job key prefix ("bull:<to>:")
  ARGV[4]      the job's new fleet signature, or "": replaces the value of
               the "pisig" member of its opts (a signature binds the queue,
               so the host that moves a signed job signs it again)

  Returns 1 moved, 0 no such job, -4 locked by a consumer (active), -8 a
  scheduler's pending run, -9 the target already has a job with this id,
  -10 the job is not waiting, paused, delayed or prioritized (finished jobs
  stay where they are).
]]
local src = K()
local dst = {
  wait = KEYS[15], active = KEYS[16], paused = KEYS[17], delayed = KEYS[18],
  prioritized = KEYS[19], completed = KEYS[20], failed = KEYS[21], meta = KEYS[22],
  events = KEYS[23], marker = KEYS[24], pc = KEYS[25], stalled = KEYS[26],
  repeatKey = KEYS[27], id = KEYS[28],
}
local srcPrefix, id, dstPrefix, newSig = ARGV[1], ARGV[2], ARGV[3], ARGV[4] or ""
local jobKey, dstKey = srcPrefix .. id, dstPrefix .. id

if rcall("EXISTS", jobKey) == 0 then return 0 end
if rcall("EXISTS", jobKey .. ":lock") == 1 then return -4 end
local f = rcall("HMGET", jobKey, "rjk", "deid", "priority")
if f[1] then
  local cur = rcall("ZSCORE", src.repeatKey, f[1])
  if cur and id == ("repeat:" .. f[1] .. ":" .. cur) then return -8 end
end
if rcall("EXISTS", dstKey) == 1 then return -9 end

-- Where it is now.
local state, score = nil, nil
score = rcall("ZSCORE", src.delayed, id)
if score then
  state = "delayed"
else
  score = rcall("ZSCORE", src.prioritized, id)
  if score then
    state = "prioritized"
  elseif rcall("LREM", src.wait, 0, id) > 0 or rcall("LREM", src.paused, 0, id) > 0 then
    state = "ready"
  end
end
if not state then return -10 end
if state == "delayed" then rcall("ZREM", src.delayed, id) end
if state == "prioritized" then rcall("ZREM", src.prioritized, id) end
rcall("SREM", src.stalled, id)

-- The job hash (and its logs, when a BullMQ client wrote some) move whole.
rcall("RENAME", jobKey, dstKey)
if rcall("EXISTS", jobKey .. ":logs") == 1 then rcall("RENAME", jobKey .. ":logs", dstKey .. ":logs") end
if newSig ~= "" and string.match(newSig, "^%x+$") then
  local o = rcall("HGET", dstKey, "opts")
  if o then
    local n, c = string.gsub(o, '"pisig"%s*:%s*"%x*"', '"pisig":"' .. newSig .. '"', 1)
    if c == 1 then rcall("HSET", dstKey, "opts", n) end
  end
end

-- A dedup key that still points at the job follows it, with its TTL.
if f[2] then
  local dk = srcPrefix .. "de:" .. f[2]
  if rcall("GET", dk) == id then
    local ttl = rcall("PTTL", dk)
    rcall("DEL", dk)
    local tk = dstPrefix .. "de:" .. f[2]
    if ttl > 0 then
      rcall("SET", tk, id, "PX", ttl, "NX")
    elseif rcall("EXISTS", tk) == 0 then
      rcall("SET", tk, id)
    end
  end
end

-- Into the target, in the same state. The target's meta is read here, not
-- through lib.lua's cached meta (which is the source's): paused in BullMQ
-- 5's layout means the paused list, in 6's the wait list.
local dm = rcall("HMGET", dst.meta, "paused", "version")
local dpaused = dm[1] ~= false and dm[1] ~= nil
local dlegacy = (layoutOf(dm[2]) or layoutDefault) == 5
local maxLen = maxEvents(src)
if state == "delayed" then
  rcall("ZADD", dst.delayed, score, id)
  local first = rcall("ZRANGE", dst.delayed, 0, 0, "WITHSCORES")
  if first[2] then rcall("ZADD", dst.marker, math.floor(tonumber(first[2]) / 4096), "1") end
elseif state == "prioritized" then
  rcall("ZADD", dst.prioritized, score, id)
  if not dpaused then rcall("ZADD", dst.marker, 0, "0") end
elseif dpaused and dlegacy then
  rcall("LPUSH", dst.paused, id)
else
  rcall("LPUSH", dst.wait, id)
  if not dpaused then rcall("ZADD", dst.marker, 0, "0") end
end
emit(src, maxLen, "removed", "jobId", id, "prev", state)
rcall("XADD", dst.events, "MAXLEN", "~", 10000, "*", "event", state == "delayed" and "delayed" or "waiting", "jobId", id)
return 1
