--[[
  lib.lua: helpers shared by every script of package queue.

  It is prepended to each script body when the script is built (scripts.go),
  defines functions only, and reads no KEYS or ARGV of its own.

  Every job-state script receives the same queue keys first, in this order,
  so K(...) below can name them (keys.go builds the list):

    KEYS[1]  wait          LIST   ready jobs (LPUSH in, RPOPLPUSH out)
    KEYS[2]  active        LIST   jobs held by a consumer
    KEYS[3]  paused        LIST   ready jobs while the queue is paused (BullMQ 5's
                                  layout; 6 keeps them in wait and reads only the flag)
    KEYS[4]  delayed       ZSET   score = dueMs * 4096 + sequence
    KEYS[5]  prioritized   ZSET   score = priority * 2^32 + counter
    KEYS[6]  completed     ZSET   score = finishedOn
    KEYS[7]  failed        ZSET   score = finishedOn
    KEYS[8]  meta          HASH   paused, concurrency, opts.maxLenEvents, version
    KEYS[9]  events        STREAM BullMQ events
    KEYS[10] marker        ZSET   wake-up marker consumers BZPOPMIN on
    KEYS[11] pc            STRING priority counter
    KEYS[12] stalled       SET    BullMQ's stalled candidates (we only SREM, and not on completion)
    KEYS[13] repeat        ZSET   scheduler id -> millis of its pending job
    KEYS[14] id            STRING job id counter

  ARGV[1] of every job-state script is the job key prefix ("bull:<queue>:"):
  scripts derive <prefix><jobId>, <prefix><jobId>:lock and
  <prefix>de:<dedupId>, and <repeat>:<schedulerId>, as BullMQ's own scripts do.

  Time comes from the server only: nowMs() reads TIME.

  scripts.go prepends only the helpers a script uses (with the helpers
  they use), so each top-level definition here starts at column 0 with
  "local function name" or "local name", and its comment lines sit right
  above it. Every definition runs on every call, so hot paths avoid helpers
  they do not need. Numbers passed to redis.call are formatted by the server
  with sprintf, which costs about as much as a cheap command: hot paths
  pass strings (constants, strings read from Valkey, nowMs's string).
]]
local rcall = redis.call

local function K()
  return {
    wait = KEYS[1], active = KEYS[2], paused = KEYS[3], delayed = KEYS[4],
    prioritized = KEYS[5], completed = KEYS[6], failed = KEYS[7], meta = KEYS[8],
    events = KEYS[9], marker = KEYS[10], pc = KEYS[11], stalled = KEYS[12],
    repeatKey = KEYS[13], id = KEYS[14],
  }
end

-- nowMs is the server's clock in milliseconds; the only clock scripts use.
-- It returns the number and its decimal string, built from TIME's strings
-- (seconds, then the microseconds' leading digits padded to three).
local function nowMs()
  local t = rcall("TIME")
  local ms = ""
  if #t[2] > 3 then ms = string.sub(t[2], 1, #t[2] - 3) end
  local s = t[1] .. string.sub("000" .. ms, -3)
  return tonumber(s), s
end

-- num converts v to a number, or returns def for nil, junk, cjson.null or NaN.
local function num(v, def)
  local n = tonumber(v)
  if n == nil or n ~= n then return def end
  return n
end

-- nextCount is the count after a stored one (v; nil or junk counts as 0),
-- as a number and as the decimal string redis.call is given (a number
-- argument would be formatted by the server with %.17g).
local function nextCount(v)
  if not v then return 1, "1" end
  local n = math.floor(num(v, 0)) + 1
  return n, string.format("%d", n)
end

-- decodeJSON decodes a JSON object written by us or a peer; junk gives {}.
local function decodeJSON(raw)
  if type(raw) ~= "string" or raw == "" then return {} end
  local ok, v = pcall(cjson.decode, raw)
  if ok and type(v) == "table" then return v end
  return {}
end

-- incrField adds one to a numeric hash field a peer may have written as
-- junk (HINCRBY would fail mid-script, after earlier writes).
local function incrField(key, field)
  local v = math.floor(num(rcall("HGET", key, field), 0)) + 1
  rcall("HSET", key, field, v)
  return v
end

-- layoutDefault is the BullMQ layout (6 or 5) of a queue whose meta hash
-- names no BullMQ version: Config.Layout, which the first call records
-- there; 0 (Config.Layout unset) follows 6 and records nothing. scripts.go
-- builds every script once per value by rewriting this line.
local layoutDefault = 6

-- layoutOf maps a meta "version" field to the layout it speaks: BullMQ
-- writes "bullmq:<semver>" whenever a Queue is constructed, we write
-- "pidispatch:bullmq<major>" on a queue nobody has declared. 6 and later
-- keep ready jobs in wait while paused (the meta flag alone pauses); 5 and
-- earlier move them to the paused list. nil for absent or unknown.
local function layoutOf(v)
  if type(v) ~= "string" then return nil end
  local major = tonumber(string.match(v, "^bullmq:(%d+)%.") or string.match(v, "^pidispatch:bullmq(%d+)$"))
  if not major then return nil end
  if major >= 6 then return 6 end
  return 5
end

-- meta reads the queue's meta hash once per script call: the paused flag,
-- BullMQ's global concurrency, the events stream cap and the layout
-- (legacy: BullMQ 5's paused list), writing BullMQ's default cap and our
-- layout the first time (which also makes the meta hash exist for
-- discovery). Only pause.lua changes meta, after reading it. A script that
-- only takes work (fetch.lua) sets metaReadOnly first: it reads meta and
-- writes none of it, as BullMQ 6's own fetch does, so an idle consumer does
-- not bring back the meta hash of a queue that was obliterated.
local metaCache = nil
local metaReadOnly = false
local function meta(k)
  if not metaCache then
    local m = rcall("HMGET", k.meta, "paused", "concurrency", "opts.maxLenEvents", "version")
    -- Kept as the stored string when it is a plain integer (no formatting
    -- on each XADD).
    local maxLen = m[3]
    if not maxLen or not string.find(maxLen, "^%d+$") then
      maxLen = tonumber(maxLen)
      if not maxLen then
        maxLen = 10000
        if not metaReadOnly then rcall("HSET", k.meta, "opts.maxLenEvents", maxLen) end
      end
    end
    local layout = layoutOf(m[4])
    if not layout then
      layout = layoutDefault
      if layout == 0 then
        layout = 6
      elseif not m[4] and not metaReadOnly then
        rcall("HSET", k.meta, "version", "pidispatch:bullmq" .. layout)
      end
    end
    metaCache = { paused = m[1] ~= false and m[1] ~= nil, concurrency = tonumber(m[2]), maxLen = maxLen,
      legacy = layout == 5 }
  end
  return metaCache
end

local function maxEvents(k) return meta(k).maxLen end

-- emit adds an event to the queue's events stream, capped at maxLen
-- (approximately, as BullMQ does). A maxLen of false adds it uncapped: a
-- script that emits many events caps the stream once, at its end, instead.
local function emit(k, maxLen, ...)
  if maxLen then
    rcall("XADD", k.events, "MAXLEN", "~", maxLen, "*", "event", ...)
  else
    rcall("XADD", k.events, "*", "event", ...)
  end
end

-- blocked reports whether the queue is paused, and whether its global
-- concurrency (meta.concurrency, set by BullMQ's setGlobalConcurrency) is
-- reached.
local function blocked(k)
  local m = meta(k)
  local maxed = false
  if m.concurrency and rcall("LLEN", k.active) >= m.concurrency then maxed = true end
  return m.paused, maxed
end

-- delayedScore packs a due time and a per-millisecond sequence into the
-- delayed ZSET score so jobs due in the same millisecond keep FIFO order.
local function delayedScore(k, dueMs)
  local lo = dueMs * 4096
  local hi = lo + 4095
  local last = rcall("ZREVRANGEBYSCORE", k.delayed, hi, lo, "WITHSCORES", "LIMIT", 0, 1)
  if last[2] then
    local s = tonumber(last[2])
    if s >= hi then return hi end
    return s + 1
  end
  return lo
end

-- nextDueMs returns the due time of the earliest delayed job, or nil.
local function nextDueMs(k)
  local first = rcall("ZRANGE", k.delayed, "0", "0", "WITHSCORES")
  if first[2] then return math.floor(tonumber(first[2]) / 4096) end
  return nil
end

-- delayMarker sets the marker's "1" member to the earliest due time, waking
-- one sleeping consumer, which then sleeps until that time.
local function delayMarker(k)
  local due = nextDueMs(k)
  if due then rcall("ZADD", k.marker, due, "1") end
end

local function priorityScore(k, priority)
  local c = (math.floor(num(rcall("GET", k.pc), 0)) + 1) % 4294967296
  rcall("SET", k.pc, c)
  return priority * 4294967296 + c
end

-- moveAll appends list from to the consumption end of list to (its older
-- end: the jobs moved were ready first), renaming it when to is empty.
local function moveAll(from, to)
  if rcall("EXISTS", from) == 0 then return end
  if rcall("EXISTS", to) == 0 then
    rcall("RENAME", from, to)
    return
  end
  local ids = rcall("LRANGE", from, 0, -1)
  for i = 1, #ids, 5000 do
    rcall("RPUSH", to, unpack(ids, i, math.min(i + 4999, #ids)))
  end
  rcall("DEL", from)
end

-- readyList is the list a ready job goes to: wait, or in BullMQ 5's layout
-- the paused list while the queue is paused.
local function readyList(k, paused)
  if paused and meta(k).legacy then return k.paused end
  return k.wait
end

-- enqueue makes a job ready: prioritized ZSET, or wait list (paused list
-- while paused, in BullMQ 5's layout), and wakes a consumer unless the
-- queue is paused or maxed.
local function enqueue(k, jobId, priority, pushCmd)
  local paused, maxed = blocked(k)
  if priority > 0 then
    rcall("ZADD", k.prioritized, priorityScore(k, priority), jobId)
  else
    rcall(pushCmd, readyList(k, paused), jobId)
  end
  if not paused and not maxed then rcall("ZADD", k.marker, "0", "0") end
end

-- addDelayed puts a job in the delayed ZSET, due at dueMs.
local function addDelayed(k, jobId, dueMs, maxLen)
  rcall("ZADD", k.delayed, delayedScore(k, dueMs), jobId)
  emit(k, maxLen, "delayed", "jobId", jobId, "delay", dueMs)
  delayMarker(k)
end

-- promoteDue moves delayed jobs due by server time to ready (at most 1000
-- per call, like BullMQ), skipping ids whose job hash is gone.
local function promoteDue(k, prefix, now, maxLen)
  local due = rcall("ZRANGEBYSCORE", k.delayed, 0, (now + 1) * 4096 - 1, "LIMIT", 0, 1000)
  if #due == 0 then return 0 end
  rcall("ZREM", k.delayed, unpack(due))
  local paused, maxed = blocked(k)
  local target = readyList(k, paused)
  local moved = 0
  for _, id in ipairs(due) do
    local jobKey = prefix .. id
    local prio = rcall("HGET", jobKey, "priority")
    if prio or rcall("EXISTS", jobKey) == 1 then
      local p = math.floor(num(prio, 0))
      if p > 0 then
        rcall("ZADD", k.prioritized, priorityScore(k, p), id)
      else
        rcall("LPUSH", target, id)
      end
      rcall("HSET", jobKey, "delay", 0)
      emit(k, maxLen, "waiting", "jobId", id, "prev", "delayed")
      moved = moved + 1
    end
  end
  if moved > 0 and not paused and not maxed then rcall("ZADD", k.marker, "0", "0") end
  return moved
end

-- keepOf reads a removeOnComplete/removeOnFail value in any of BullMQ's
-- forms (absent, bool, count, {age, count, limit}). It returns keep (false:
-- delete the job now), age in seconds or nil, count or nil, and the
-- per-call age-removal limit.
local function keepOf(v)
  if v == nil or v == cjson.null or v == false then return true, nil, nil, 1000 end
  if v == true then return false, nil, nil, 1000 end
  if type(v) == "number" then
    if v == 0 then return false, nil, nil, 1000 end
    return true, nil, v, 1000
  end
  if type(v) == "table" then
    local count = num(v["count"], nil)
    if count == 0 then return false, nil, nil, 1000 end
    return true, num(v["age"], nil), count, num(v["limit"], 1000)
  end
  return true, nil, nil, 1000
end

local function removeJobKeys(jobKey)
  rcall("DEL", jobKey, jobKey .. ":logs", jobKey .. ":dependencies",
    jobKey .. ":processed", jobKey .. ":failed", jobKey .. ":unsuccessful")
end

-- trim applies age and count retention to a finished set.
local function trim(setKey, prefix, now, age, count, limit)
  if age then
    local cutoff = now - age * 1000
    local old = rcall("ZREVRANGEBYSCORE", setKey, cutoff, "-inf", "LIMIT", 0, limit)
    for _, id in ipairs(old) do removeJobKeys(prefix .. id) end
    if #old > 0 then
      for i = 1, #old, 5000 do
        rcall("ZREM", setKey, unpack(old, i, math.min(i + 4999, #old)))
      end
    end
  end
  if count and count > 0 then
    local extra = rcall("ZREVRANGE", setKey, count, -1)
    for _, id in ipairs(extra) do removeJobKeys(prefix .. id) end
    if #extra > 0 then rcall("ZREMRANGEBYRANK", setKey, 0, -(count + 1)) end
  end
end

-- releaseDedup deletes a dedup key that still points at this job and has no
-- TTL (BullMQ's "simple" mode: dedup lasts until the job finishes).
local function releaseDedup(prefix, dedupId, jobId)
  if not dedupId then return end
  local key = prefix .. "de:" .. dedupId
  if rcall("PTTL", key) == -1 and rcall("GET", key) == jobId then
    rcall("DEL", key)
  end
end

-- requeueDedupNext adds the job kept at "<prefix>dn:<dedupId>" (BullMQ's
-- keepLastIfActive mode: a job deduplicated while the holder was active)
-- once the holder has finished, as BullMQ's requeueDeduplicatedJob does:
-- under the id it was given ("jid"), or the next counter id, holding the
-- dedup id in turn. A kept job whose id exists meanwhile is dropped.
local function requeueDedupNext(k, prefix, now, maxLen, dedupId)
  local nextKey = prefix .. "dn:" .. dedupId
  local f = rcall("HMGET", nextKey, "name", "data", "opts", "rjk", "jid")
  if not f[1] and not f[3] then return end
  local counter = tostring(rcall("INCR", k.id))
  local jobId = f[5] or counter
  local jobKey = prefix .. jobId
  rcall("DEL", nextKey)
  if rcall("EXISTS", jobKey) == 1 then
    emit(k, maxLen, "duplicated", "jobId", jobId)
    return
  end
  local opts = decodeJSON(f[3])
  local de = opts["de"]
  if type(de) ~= "table" then de = {} end
  local dedupKey = prefix .. "de:" .. dedupId
  local ttl = num(de["ttl"], 0)
  if de["keepLastIfActive"] or ttl <= 0 then
    rcall("SET", dedupKey, jobId)
  else
    rcall("SET", dedupKey, jobId, "PX", ttl)
  end
  local delay = math.max(0, math.floor(num(opts["delay"], 0)))
  local priority = math.max(0, math.floor(num(opts["priority"], 0)))
  rcall("HSET", jobKey, "name", f[1] or "", "data", f[2] or "{}", "opts", f[3] or "{}",
    "timestamp", now, "delay", delay, "priority", priority, "deid", dedupId)
  if f[4] then rcall("HSET", jobKey, "rjk", f[4]) end
  emit(k, maxLen, "added", "jobId", jobId, "name", f[1] or "")
  if delay > 0 then
    addDelayed(k, jobId, now + delay, maxLen)
  else
    local pushCmd = "LPUSH"
    if opts["lifo"] == true then pushCmd = "RPUSH" end
    enqueue(k, jobId, priority, pushCmd)
    emit(k, maxLen, "waiting", "jobId", jobId)
  end
end

-- checkLock verifies the caller holds the job: 0 ok, -2 no lock, -6 another
-- token holds it. It changes nothing.
local function checkLock(jobKey, token)
  local held = rcall("GET", jobKey .. ":lock")
  if held == token then return 0 end
  if held then return -6 end
  return -2
end

-- finish moves an active job (already removed from the active list) to
-- completed or failed, applying its own retention options. attrs is the
-- job's HMGET opts, deid, atm when the caller already read it, and nowS
-- now's string (both optional). The opts JSON is decoded only when it can
-- hold the retention option.
local function finish(k, prefix, now, maxLen, jobId, jobKey, target, field, value, attrs, nowS)
  attrs = attrs or rcall("HMGET", jobKey, "opts", "deid", "atm")
  local setKey, optName = k.completed, "removeOnComplete"
  if target == "failed" then setKey, optName = k.failed, "removeOnFail" end
  local keepSpec = nil
  local raw = attrs[1]
  if raw and (string.find(raw, optName, 1, true) or string.find(raw, "\\", 1, true)) then
    keepSpec = decodeJSON(raw)[optName]
  end
  local atm, atmS = nextCount(attrs[3])
  local keep, age, count, limit = keepOf(keepSpec)
  if keep then
    rcall("ZADD", setKey, nowS or now, jobId)
    rcall("HSET", jobKey, field, value, "finishedOn", nowS or now, "atm", atmS)
    if target == "failed" then rcall("HDEL", jobKey, "defa") end
    trim(setKey, prefix, now, age, count, limit)
  else
    removeJobKeys(jobKey)
  end
  local dedupId = attrs[2] or nil
  releaseDedup(prefix, dedupId, jobId)
  emit(k, maxLen, target, "jobId", jobId, field, value, "prev", "active")
  if dedupId then requeueDedupNext(k, prefix, now, maxLen, dedupId) end
  return atm
end

-- wakeIfFreed re-arms the marker after a job leaves active, when the queue
-- has a global concurrency limit (BullMQ's meta.concurrency) and ready
-- jobs: consumers that found it maxed are asleep and would not wake.
local function wakeIfFreed(k)
  local m = meta(k)
  if m.paused or not m.concurrency then return end
  if rcall("LLEN", k.wait) > 0 or rcall("ZCARD", k.prioritized) > 0 then
    rcall("ZADD", k.marker, "0", "0")
  end
end

-- createSchedulerJob stores and enqueues the job of one scheduler run at
-- millis, from the scheduler's template. Its opts.repeat is the taken
-- run's (s.rep, every option a peer set kept) with the scheduler's
-- pattern, tz, every and iteration count, and its limit, startDate and
-- endDate where the run had none. It returns the job id, or nil when a job
-- with that id already exists.
local function createSchedulerJob(k, prefix, now, maxLen, sid, millis, s)
  -- s: name, data, opts (template JSON), pattern, tz, every, ic, limit,
  -- startDate, endDate, rep (the taken run's opts.repeat, or nil), count
  millis = tonumber(millis)
  local jobId = "repeat:" .. sid .. ":" .. millis
  local jobKey = prefix .. jobId
  if rcall("EXISTS", jobKey) == 1 then return nil end
  local opts = decodeJSON(s.opts)
  local delay = millis - now
  if delay < 0 then delay = 0 end
  local rep = {}
  for key, v in pairs(s.rep or {}) do rep[key] = v end
  rep["count"] = s.count or s.ic
  if s.pattern then rep["pattern"] = s.pattern end
  if s.tz then rep["tz"] = s.tz end
  if s.every then rep["every"] = s.every end
  for _, key in ipairs({ "limit", "startDate", "endDate" }) do
    if rep[key] == nil and s[key] then rep[key] = s[key] end
  end
  opts["repeat"] = rep
  opts["jobId"] = jobId
  opts["delay"] = delay
  opts["prevMillis"] = millis
  local prio = math.floor(num(opts["priority"], 0))
  local ok, optsJSON = pcall(cjson.encode, opts)
  if not ok then optsJSON = cjson.encode({ jobId = jobId, delay = delay, prevMillis = millis, ["repeat"] = rep }) end
  rcall("HSET", jobKey, "name", s.name or "", "data", s.data or "{}", "opts", optsJSON,
    "timestamp", now, "delay", delay, "priority", prio, "rjk", sid)
  if delay > 0 then
    addDelayed(k, jobId, millis, maxLen)
  else
    enqueue(k, jobId, prio, "LPUSH")
    emit(k, maxLen, "waiting", "jobId", jobId)
  end
  return jobId
end

local function schedulerFields(k, sid)
  local sk = k.repeatKey .. ":" .. sid
  local f = rcall("HMGET", sk, "name", "data", "opts", "pattern", "tz", "every", "nx", "ic",
    "limit", "startDate", "endDate")
  if not f[1] then return nil, sk end
  return {
    name = f[1], data = f[2] or nil, opts = f[3] or nil, pattern = f[4] or nil,
    tz = f[5] or nil, every = num(f[6], nil), nx = num(f[7], nil), ic = num(f[8], 1),
    limit = num(f[9], nil), startDate = num(f[10], nil), endDate = num(f[11], nil),
  }, sk
end

-- schedulerMayRun decides, as a BullMQ worker does when it takes a run,
-- whether scheduler s makes another run after the taken one (jobId): not
-- once the run's count reaches its repeat.limit, nor once now is past its
-- endDate. It records the taken run's opts.repeat and the next count in s.
-- (BullMQ reads limit and endDate from the run's opts.repeat; the
-- scheduler hash answers when the run has none.)
local function schedulerMayRun(prefix, now, jobId, s)
  local rep = decodeJSON(rcall("HGET", prefix .. jobId, "opts"))["repeat"]
  if type(rep) ~= "table" then rep = {} end
  s.rep = rep
  local count = num(rep["count"], nil) or s.ic
  s.count = count + 1
  local limit = num(rep["limit"], nil) or s.limit
  if limit and s.count > limit then return false end
  local endDate = num(rep["endDate"], nil) or s.endDate
  if endDate and now > endDate then return false end
  s.endMs = endDate
  return true
end

-- schedulerBefore reports whether a cron run at millis is within s's
-- endDate (cron-parser finds no run past it; "every" runs are not bound).
local function schedulerBefore(s, millis)
  return not (s.pattern and s.endMs and tonumber(millis) > s.endMs)
end

-- schedulerOnTake runs when a consumer takes a job of scheduler sid (its
-- "rjk" field). If the job is its scheduler's pending run and the schedule
-- goes on (schedulerMayRun), the next run is created now, in this call,
-- from the next time stored at the last upsert/advance ("nx"), or computed
-- here for BullMQ "every" schedulers. It returns {} when nothing more is
-- needed, or {flag, schedulerId, pattern, tz, baseMillis} asking the
-- caller to compute cron times: flag 1 = store the run after baseMillis as
-- the new "nx"; flag 2 = no stored next time, create the run after
-- max(now, baseMillis) and store the one after it.
local function schedulerOnTake(k, prefix, now, maxLen, jobId, sid)
  local cur = rcall("ZSCORE", k.repeatKey, sid)
  if not cur or jobId ~= ("repeat:" .. sid .. ":" .. cur) then return {} end
  local curMs = tonumber(cur)
  local s, sk = schedulerFields(k, sid)
  if not s or not schedulerMayRun(prefix, now, jobId, s) then return {} end
  if s.every and s.every > 0 then
    local nextMs = curMs + s.every
    if nextMs <= now then
      nextMs = curMs + (math.floor((now - curMs) / s.every) + 1) * s.every
    end
    s.ic = incrField(sk, "ic")
    createSchedulerJob(k, prefix, now, maxLen, sid, nextMs, s)
    rcall("ZADD", k.repeatKey, nextMs, sid)
    return {}
  end
  if not s.pattern then return {} end
  if s.nx and s.nx > curMs then
    if not schedulerBefore(s, s.nx) then return {} end
    s.ic = incrField(sk, "ic")
    if createSchedulerJob(k, prefix, now, maxLen, sid, s.nx, s) then
      rcall("ZADD", k.repeatKey, s.nx, sid)
      rcall("HDEL", sk, "nx")
      return { 1, sid, s.pattern, s.tz or "", s.nx }
    end
  end
  return { 2, sid, s.pattern, s.tz or "", curMs }
end

-- jobFieldIndex numbers the job hash fields Go's parseJob reads, as
-- takeFieldOrder in job.go orders them (a test keeps the two the same). A
-- take returns its job's fields with each name replaced by its number (0
-- for a field Go does not read): a number costs the client no allocation,
-- a string two, and the names were half of a take's strings.
local jobFieldIndex = { name = 1, data = 2, opts = 3, deid = 4, priority = 5, atm = 6, attemptsMade = 7,
  ats = 8, stc = 9, timestamp = 10, processedOn = 11, finishedOn = 12, delay = 13, failedReason = 14,
  returnvalue = 15, rjk = 16, pb = 17, defa = 18, pigw = 19 }

-- takeNext moves the next ready job to active under a lock and returns its
-- id, key, hash fields (HGETALL's, before this take's writes, names
-- numbered by jobFieldIndex), scheduler id ("rjk") and new attempts-started
-- count ("ats"), or nil. The caller knows the rest of what the take wrote
-- (processedOn is now, pb the worker name it passed). Ghost ids (no job
-- hash) and BullMQ v4 "0:" markers are dropped on the way; when dropped is
-- a table, each drop adds its id (cut to 300 bytes) and why
-- ("no-job-hash", "bullmq-marker"), at most 10 drops, for the caller to log. With rearm it
-- wakes a peer when more jobs are ready: a consumer woken by the marker
-- must pass the wake-up on. A consumer that completes a job and takes the
-- next in the same call consumed no wake-up, so it has none to pass on (an
-- add re-arms anyway).
local function takeNext(k, prefix, now, maxLen, token, lockMs, worker, rearm, nowS, dropped)
  local paused, maxed = blocked(k)
  if paused or maxed then return nil end
  nowS = nowS or now
  for _ = 1, 100 do
    local id = rcall("RPOPLPUSH", k.wait, k.active)
    if not id then
      local p = rcall("ZPOPMIN", k.prioritized)
      if #p == 0 then return nil end
      id = p[1]
      rcall("LPUSH", k.active, id)
    end
    local jobKey = prefix .. id
    local fields = nil
    if string.sub(id, 1, 2) ~= "0:" then fields = rcall("HGETALL", jobKey) end
    if fields and #fields > 0 then
      rcall("SET", jobKey .. ":lock", token, "PX", lockMs)
      local atsIx, rjkIx = jobFieldIndex.ats, jobFieldIndex.rjk
      local stored, rjk = nil, nil
      for i = 1, #fields, 2 do
        local ix = jobFieldIndex[fields[i]] or 0
        fields[i] = ix
        if ix == atsIx then
          stored = fields[i + 1]
        elseif ix == rjkIx then
          rjk = fields[i + 1]
        end
      end
      local ats, atsS = nextCount(stored)
      if worker ~= "" then
        rcall("HSET", jobKey, "processedOn", nowS, "ats", atsS, "pb", worker)
      else
        rcall("HSET", jobKey, "processedOn", nowS, "ats", atsS)
      end
      emit(k, maxLen, "active", "jobId", id, "prev", "waiting")
      if rearm and (rcall("LLEN", k.wait) > 0 or rcall("ZCARD", k.prioritized) > 0) then
        rcall("ZADD", k.marker, "0", "0")
      end
      return id, jobKey, fields, rjk, ats
    end
    rcall("LREM", k.active, "-1", id)
    if dropped and #dropped < 20 then
      local why = "no-job-hash"
      if string.sub(id, 1, 2) == "0:" then why = "bullmq-marker" end
      dropped[#dropped + 1] = string.sub(id, 1, 300)
      dropped[#dropped + 1] = why
    end
  end
  return nil
end

-- fetchReply promotes due jobs, takes the next one and returns the six
-- values of a take's reply, shared by fetch.lua and complete.lua (multiple
-- values, not a table: complete.lua lays them out flat, after the server
-- time they share):
--   jobId or "", msUntilNextDelayed or false, {numbered fields} or false,
--   {scheduler request} or false, attempts started or false,
--   {dropped id, why, ...} or false
-- Each table of a script's reply costs the server seven probes for the
-- special reply fields (err, ok, double, ...), and each value the client an
-- allocation or two: what is absent is false (a nil reply).
-- The delayed set's head is read once; promotion (and a second read) only
-- happen when it is due, and a second read when a scheduler run was made.
-- head, when given, carries the head's due time (head.due, nil for none)
-- from one fetchReply to the next in the same script call once head.known
-- is set: nothing else in a take or a completion changes the delayed set.
local function fetchReply(k, prefix, now, maxLen, token, lockMs, worker, rearm, nowS, head)
  head = head or {}
  if not head.known then
    head.due = nextDueMs(k)
    head.known = true
  end
  if head.due and head.due <= now then
    promoteDue(k, prefix, now, maxLen)
    head.due = nextDueMs(k)
  end
  local dropped = {}
  local id, _, fields, rjk, ats = takeNext(k, prefix, now, maxLen, token, lockMs, worker, rearm, nowS, dropped)
  local sched = false
  if rjk then
    sched = schedulerOnTake(k, prefix, now, maxLen, id, rjk)
    head.due = nextDueMs(k)
  end
  local due = head.due
  local wait = false
  if due then
    wait = due - now
    if wait < 0 then wait = 0 end
    -- Re-arm the delayed marker in case the consumer that slept on it is
    -- the one that just got busy.
    if id then rcall("ZADD", k.marker, due, "1") end
  end
  if #dropped == 0 then dropped = false end
  return id or "", wait, fields or false, sched, ats or false, dropped
end
