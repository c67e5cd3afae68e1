package fleetstate

import (
	"github.com/redis/go-redis/v9"
)

// The Lua scripts of the spend caps and the run mirror. Each documents its KEYS
// and ARGV at its top. Time is always the server's (redis.call('TIME')), so every
// host of a fleet agrees on which UTC day and ISO week a start belongs to,
// whatever its own clock says.

// budgetDatesLua is prepended to the scripts that need today's budget keys. The
// date of a window key comes from the server's clock, which only the script
// reads, so those scripts append the suffix to a prefix formatted in keys.go:
//
//	day suffix:   YYYY-MM-DD of the UTC day
//	week suffix:  YYYY-MM-DD of the Monday (UTC) that starts the ISO week
//	month suffix: YYYY-MM of the UTC month
//
// BudgetDayKey, BudgetWeekKey and BudgetMonthKey in keys.go format the same
// suffixes in Go; a test holds the two to the same answers across year ends,
// leap days, month ends and Sunday/Monday.
//
// now_ms(override): production always passes "" and the script reads TIME. Only
// the tests of this package pass an epoch millisecond, to drive the civil-date
// arithmetic across boundaries the wall clock will not reach while they run. No
// exported API can set it.
const budgetDatesLua = `
local function now_ms(override)
  if override ~= nil and override ~= '' then
    local v = tonumber(override)
    if v == nil or v ~= math.floor(v) or v < 0 or v > 253402300799999 then
      return nil
    end
    return v
  end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- civil date of a count of days since 1970-01-01 (proleptic Gregorian),
-- H. Hinnant's civil_from_days, in floored integer arithmetic on doubles.
local function ymd(days)
  local z = days + 719468
  local era = math.floor(z / 146097)
  local doe = z - era * 146097
  local yoe = math.floor((doe - math.floor(doe / 1460) + math.floor(doe / 36524) - math.floor(doe / 146096)) / 365)
  local y = yoe + era * 400
  local doy = doe - (365 * yoe + math.floor(yoe / 4) - math.floor(yoe / 100))
  local mp = math.floor((5 * doy + 2) / 153)
  local d = doy - math.floor((153 * mp + 2) / 5) + 1
  local m
  if mp < 10 then m = mp + 3 else m = mp - 9 end
  if m <= 2 then y = y + 1 end
  return string.format('%04d-%02d-%02d', y, m, d)
end

-- the UTC day, the Monday of its ISO week and its month (YYYY-MM).
-- 1970-01-01 was a Thursday: (days + 3) % 7 is 0 on a Monday (Lua's % is
-- floored).
local function budget_dates(ms)
  local days = math.floor(ms / 86400000)
  local monday = days - (days + 3) % 7
  local day = ymd(days)
  return day, ymd(monday), string.sub(day, 1, 7)
end

-- the key of a window: its prefix and the date suffix of its kind.
local function window_key(prefix, kind, day, monday, month)
  if kind == 'w' then
    return prefix .. monday
  elseif kind == 'm' then
    return prefix .. month
  end
  return prefix .. day
end
`

// reserveScript counts one container start in every active window, or in none.
//
// KEYS: none declared. The window keys carry the server's date, known only here;
// the script builds them as prefix .. day (kind "d"), prefix .. monday (kind
// "w") or prefix .. month (kind "m"), the prefixes coming from keys.go.
// ARGV[1]             -> now_ms override: "" in production (see budgetDatesLua)
// ARGV[2]             -> TTL in ms of a day key (2 d)
// ARGV[3]             -> TTL in ms of a week key (9 d)
// ARGV[4]             -> TTL in ms of a month key (40 d)
// ARGV[5]             -> the largest count a window may hold (maxSaneCount)
// ARGV[6+5i .. 10+5i] -> window i, narrowest first: prefix, kind ("d"|"w"|"m"),
// cap, name (for error text), soft hold ("" for none, else the most starts the
// soft hold lets the window reach)
//
// Every window is read first: a key of another type, or holding anything but
// a decimal count from 0 to ARGV[5] (a negative count would lift the cap, a
// huge one is no count a fleet made), stops the script before anything is
// counted with an error reply starting "BUDGETCORRUPT" and naming the window.
// Every window is INCRed, and a key without expiry gets its TTL in the same
// script. Then the windows are checked in order; the first whose count exceeds
// its cap, or else its soft hold, refuses, and every INCR is undone (a refusal
// consumes nothing).
// Returns {granted (1|0), refusing window (1-based, 0 when granted), {keys},
// {counts}, soft (1 when the refusal is the soft hold's, else 0)}: the counts
// after this start when granted, before it when refused.
// A key that is not an integer counter stops the script with an error after
// undoing what it had counted.
var reserveScript = redis.NewScript(budgetDatesLua + `
local now = now_ms(ARGV[1])
if now == nil then
  return redis.error_reply('ERR budget: now_ms override is not an epoch millisecond')
end
local day, monday, month = budget_dates(now)
local ttls = {d = ARGV[2], w = ARGV[3], m = ARGV[4]}
local keys, caps, names, softs, counts = {}, {}, {}, {}, {}
local sane = tonumber(ARGV[5])
for i = 6, #ARGV, 5 do
  local key = window_key(ARGV[i], ARGV[i + 1], day, monday, month)
  local ty = redis.call('TYPE', key).ok
  if ty ~= 'none' then
    local v = ty == 'string' and redis.call('GET', key) or nil
    if v == nil or not string.match(v, '^%d+$') or #v > 15 or tonumber(v) > sane then
      return redis.error_reply('BUDGETCORRUPT window ' .. ARGV[i + 3] .. ' (' .. key .. ') holds ' .. (v and string.sub(v, 1, 32) or 'a ' .. ty))
    end
  end
end
for i = 6, #ARGV, 5 do
  local key = window_key(ARGV[i], ARGV[i + 1], day, monday, month)
  keys[#keys + 1] = key
  caps[#caps + 1] = tonumber(ARGV[i + 2])
  names[#names + 1] = ARGV[i + 3]
  softs[#softs + 1] = tonumber(ARGV[i + 4])
  local n = redis.pcall('INCR', key)
  if type(n) == 'table' and n.err then
    for j = 1, #counts do
      redis.call('DECR', keys[j])
    end
    return redis.error_reply('ERR budget: window ' .. ARGV[i + 3] .. ' (' .. key .. '): ' .. n.err)
  end
  counts[#counts + 1] = n
  if redis.call('PTTL', key) < 0 then
    redis.call('PEXPIRE', key, ttls[ARGV[i + 1]] or ttls.d)
  end
end
for i = 1, #keys do
  local hard = counts[i] > caps[i]
  if hard or (softs[i] ~= nil and counts[i] > softs[i]) then
    for j = 1, #keys do
      counts[j] = redis.call('DECR', keys[j])
    end
    local soft = 1
    if hard then soft = 0 end
    return {0, i, keys, counts, soft}
  end
end
return {1, 0, keys, counts, 0}
`)

// releaseScript gives back the windows of one reservation, at most once.
//
// KEYS[1]    -> the reservation's release guard, budget:rel:<token>
// KEYS[2..n] -> the window keys the reservation incremented
// ARGV[1]    -> the guard's TTL in ms (outlives every window key)
//
// Returns -1 when the guard was already set (released before: nothing is done),
// else how many windows it decremented. A window that is gone or not above zero
// (expired, or reset by an operator) is left alone, so a late release never
// creates a negative counter without expiry.
var releaseScript = redis.NewScript(`
if not redis.call('SET', KEYS[1], '1', 'NX', 'PX', ARGV[1]) then
  return -1
end
local n = 0
for i = 2, #KEYS do
  local v = redis.pcall('GET', KEYS[i])
  if type(v) == 'string' then
    local c = tonumber(v)
    if c ~= nil and c > 0 and c == math.floor(c) then
      local r = redis.pcall('DECR', KEYS[i])
      if type(r) == 'number' then
        n = n + 1
      end
    end
  end
end
return n
`)

// countsScript reads the current global counters.
//
// KEYS: none declared (the date is the server's; see reserveScript).
// ARGV[1] -> now_ms override: "" in production (see budgetDatesLua)
// ARGV[2] -> the global day prefix
// ARGV[3] -> the global week prefix
// ARGV[4] -> the global month prefix
//
// Returns {now ms, day, monday, month, day count, week count, month count}; a
// count is "" when its key is absent, else the stored string (the caller
// parses it).
var countsScript = redis.NewScript(budgetDatesLua + `
local now = now_ms(ARGV[1])
if now == nil then
  return redis.error_reply('ERR budget: now_ms override is not an epoch millisecond')
end
local day, monday, month = budget_dates(now)
local d = redis.call('GET', ARGV[2] .. day)
local w = redis.call('GET', ARGV[3] .. monday)
local m = redis.call('GET', ARGV[4] .. month)
return {string.format('%.0f', now), day, monday, month, d or '', w or '', m or ''}
`)

// mirrorScript writes one run record to the fleet's run mirror and trims it.
//
// KEYS[1] -> runs:rec:<stem>.attempt-<n>, the record's body
// KEYS[2] -> runs:index, a ZSET of <stem>.attempt-<n> scored by endedAt (ms)
// ARGV[1] -> the record as JSON
// ARGV[2] -> the window in ms (retention, at most 92 days)
// ARGV[3] -> the score: the record's endedAt in ms
// ARGV[4] -> the index member: <stem>.attempt-<n>
// ARGV[5] -> the most index entries kept
//
// A record already older than the window is not written (the mirror never
// outlives the files it mirrors) and returns 0; otherwise returns 1. The index's
// expiry is rolling: it is refreshed on every write, so it disappears only after
// a window without a single run.
var mirrorScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local window = tonumber(ARGV[2])
local max = tonumber(ARGV[5])
local ty = redis.call('TYPE', KEYS[2]).ok
if ty ~= 'zset' and ty ~= 'none' then
  return redis.error_reply('ERR run mirror: ' .. KEYS[2] .. ' holds a ' .. ty)
end
if tonumber(ARGV[3]) <= now - window then
  return 0
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', window)
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[4])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', '(' .. string.format('%.0f', now - window))
redis.call('ZREMRANGEBYRANK', KEYS[2], 0, -(max + 1))
redis.call('PEXPIRE', KEYS[2], window)
return 1
`)

// claimScript takes the claim of recording one attempt, fleet-wide.
//
// KEYS[1] -> runs:claim:<stem>.attempt-<n>
// ARGV[1] -> this host's name
// ARGV[2] -> the claim's lifetime in ms
//
// Returns the claim's owner: ARGV[1] when this call took it (or already held it).
var claimScript = redis.NewScript(`
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return ARGV[1]
end
return redis.call('GET', KEYS[1]) or ARGV[1]
`)

// releaseClaimScript drops a claim this host holds.
//
// KEYS[1] -> runs:claim:<stem>.attempt-<n>
// ARGV[1] -> this host's name
var releaseClaimScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
`)

// suspendScript records a provider's rate-limit suspension; a later reset wins.
//
// KEYS[1] -> ratelimit:<provider>, STRING "<until ms> <why>"
// KEYS[2] -> ratelimit:providers, SET of provider names
// ARGV[1] -> the reset, epoch ms
// ARGV[2] -> the reason (cleaned by the caller)
// ARGV[3] -> the provider name (validated by the caller)
// ARGV[4] -> the longest suspension in ms (MaxSuspension)
//
// The reset is held to now + ARGV[4] on the server's clock. A reset not after
// now does nothing. A stored reset that is later and reads as one (a number
// not beyond now + ARGV[4]) is kept; anything else, including a key of another
// type, is replaced. The key expires at the reset (PX); the set expires a
// minute after the longest suspension, so it never outlives its members for
// long. Returns 1 when the record was written, 0 when it was kept.
var suspendScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local max = tonumber(ARGV[4])
local reset = tonumber(ARGV[1])
if reset == nil then
  return redis.error_reply('ERR rate limits: the reset is not an epoch millisecond')
end
if reset > now + max then reset = now + max end
if reset <= now then return 0 end
local ty = redis.call('TYPE', KEYS[1]).ok
if ty == 'string' then
  local digits, rest = string.match(redis.call('GET', KEYS[1]), '^(%d+)(.*)$')
  local cur = tonumber(digits)
  if cur ~= nil and (rest == '' or string.sub(rest, 1, 1) == ' ') and cur >= reset and cur <= now + max then
    return 0
  end
elseif ty ~= 'none' then
  redis.call('DEL', KEYS[1])
end
if redis.call('TYPE', KEYS[2]).ok ~= 'set' then
  redis.call('DEL', KEYS[2])
end
redis.call('SET', KEYS[1], string.format('%.0f', reset) .. ' ' .. ARGV[2], 'PX', string.format('%.0f', reset - now))
redis.call('SADD', KEYS[2], ARGV[3])
redis.call('PEXPIRE', KEYS[2], string.format('%.0f', max + 60000))
return 1
`)

// listSuspensionsScript reads every suspension and prunes the ended ones.
//
// KEYS[1] -> ratelimit:providers, SET of provider names
// ARGV[1] -> the key prefix of a suspension, ratelimit:
//
// Returns {name, value, name, value, ...} for the names whose key is a
// STRING; names whose key is gone are removed from the set. A set of another
// type reads as empty. The caller validates every name and value.
var listSuspensionsScript = redis.NewScript(`
if redis.call('TYPE', KEYS[1]).ok ~= 'set' then
  return {}
end
local out = {}
for _, name in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  local key = ARGV[1] .. name
  local ty = redis.call('TYPE', key).ok
  if ty == 'none' then
    redis.call('SREM', KEYS[1], name)
  elseif ty == 'string' then
    out[#out + 1] = name
    out[#out + 1] = redis.call('GET', key)
  end
end
return out
`)

// dollarWindowsLua is prepended to the dollar scripts after budgetDatesLua: it
// reads one dollar window. A window is its settled spend (a STRING of
// micro-dollars at the window's key) plus its live reservations (a ZSET of
// members scored by expiry ms at key .. res_suffix, and a HASH of their
// micro-dollars at key .. amt_suffix). A member is live while its expiry is
// after now.
//
// A settled spend or a reservation that is not a decimal count of
// micro-dollars from 0 to DOLLAR_SANE (maxSaneMicros) makes the window
// corrupt: a negative spend would lift the cap.
const dollarWindowsLua = `
local DOLLAR_SANE = ` + maxSaneMicrosLua + `
local function dollar_type_ok(key, want)
  local ty = redis.call('TYPE', key).ok
  return ty == 'none' or ty == want
end

-- returns settled, held (micro-dollars) or nil, error text.
local function dollar_read(key, res, amt, now)
  if not dollar_type_ok(key, 'string') or not dollar_type_ok(res, 'zset') or not dollar_type_ok(amt, 'hash') then
    return nil, key .. ' is not a dollar window'
  end
  local settled = 0
  local v = redis.call('GET', key)
  if v then
    settled = tonumber(v)
    if not string.match(v, '^%d+$') or #v > 16 or settled > DOLLAR_SANE then
      return nil, key .. ' holds ' .. string.sub(v, 1, 32) .. ', not micro-dollars'
    end
  end
  local held = 0
  for _, m in ipairs(redis.call('ZRANGEBYSCORE', res, '(' .. string.format('%.0f', now), '+inf')) do
    local a = redis.call('HGET', amt, m)
    local n = tonumber(a)
    if a and (not string.match(a, '^%d+$') or #a > 16 or n > DOLLAR_SANE) then
      return nil, amt .. ' holds ' .. string.sub(a, 1, 32) .. ' for ' .. m .. ', not micro-dollars'
    end
    held = held + (n or 0)
  end
  return settled, held
end

-- drops the reservations of a window that expired at or before now.
local function dollar_prune(res, amt, now)
  local gone = redis.call('ZRANGEBYSCORE', res, '-inf', string.format('%.0f', now))
  for _, m in ipairs(gone) do
    redis.call('HDEL', amt, m)
  end
  if #gone > 0 then
    redis.call('ZREMRANGEBYSCORE', res, '-inf', string.format('%.0f', now))
  end
end
`

// dollarReserveScript holds a job's dollar cap in every active dollar window,
// or in none.
//
// KEYS: none declared. The window keys carry the server's date (see
// reserveScript): prefix .. day, .. monday or .. month by kind.
// ARGV[1]              -> now_ms override: "" in production (see budgetDatesLua)
// ARGV[2]              -> the reservation's ttl in ms
// ARGV[3]              -> the reservation's member (<jobId>#<token>)
// ARGV[4]              -> the micro-dollars to hold
// ARGV[5], ARGV[6]     -> the suffixes of a window's reservation ZSET and amount HASH
// ARGV[7], [8], [9]    -> TTL in ms of a day, week and month window's keys
// ARGV[10+4i .. 13+4i] -> window i, narrowest first: prefix, kind ("d"|"w"|"m"),
// cap (micro-dollars), name (for error text)
//
// Each window first drops its expired reservations. used = settled + live
// reservations; the first window, in order, where used + micros > cap refuses
// and nothing is held. Otherwise the member is added to every window with
// expiry now + ttl, and each window's keys get (or keep, when longer) their TTL
// plus the reservation's ttl.
// Returns {granted (1|0), refusing window (1-based, 0 when granted), {keys},
// {used}}: keys are the windows' settled-spend keys, used is each window's use
// including this reservation when granted, before it when refused (up to the
// refusing window). A window of the wrong type or holding junk stops the
// script before anything is held, with an error reply starting
// "BUDGETCORRUPT" (see dollarWindowsLua).
var dollarReserveScript = redis.NewScript(budgetDatesLua + dollarWindowsLua + `
local now = now_ms(ARGV[1])
if now == nil then
  return redis.error_reply('ERR dollars: now_ms override is not an epoch millisecond')
end
local day, monday, month = budget_dates(now)
local ttl, member, micros = tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[4])
local rs, as = ARGV[5], ARGV[6]
local ttls = {d = tonumber(ARGV[7]), w = tonumber(ARGV[8]), m = tonumber(ARGV[9])}
local keys, kinds, used = {}, {}, {}
for i = 10, #ARGV, 4 do
  local key = window_key(ARGV[i], ARGV[i + 1], day, monday, month)
  local settled, held = dollar_read(key, key .. rs, key .. as, now)
  if settled == nil then
    return redis.error_reply('BUDGETCORRUPT dollar window ' .. ARGV[i + 3] .. ': ' .. held)
  end
  dollar_prune(key .. rs, key .. as, now)
  keys[#keys + 1] = key
  kinds[#kinds + 1] = ARGV[i + 1]
  used[#used + 1] = settled + held
  if settled + held + micros > tonumber(ARGV[i + 2]) then
    return {0, #keys, keys, used}
  end
end
for i, key in ipairs(keys) do
  local life = (ttls[kinds[i]] or ttls.d) + ttl
  redis.call('ZADD', key .. rs, string.format('%.0f', now + ttl), member)
  redis.call('HSET', key .. as, member, string.format('%.0f', micros))
  for _, k in ipairs({key .. rs, key .. as}) do
    if redis.call('PTTL', k) < life then
      redis.call('PEXPIRE', k, string.format('%.0f', life))
    end
  end
  if redis.call('EXISTS', key) == 1 and redis.call('PTTL', key) < 0 then
    redis.call('PEXPIRE', key, string.format('%.0f', ttls[kinds[i]] or ttls.d))
  end
  used[i] = used[i] + micros
end
return {1, 0, keys, used}
`)

// dollarSettleScript replaces one reservation by the job's real spend, at
// most once.
//
// KEYS[1]    -> the reservation's settle guard, budget:usd:settle:<token>
// KEYS[2..n] -> the settled-spend keys of the windows the reservation was held in
// ARGV[1]    -> the real spend in micro-dollars (0 or more)
// ARGV[2]    -> the reservation's member
// ARGV[3], ARGV[4] -> the suffixes of a window's reservation ZSET and amount HASH
// ARGV[5]    -> the guard's TTL in ms (outlives every window)
// ARGV[6..]  -> each window key's TTL in ms, in KEYS order from KEYS[2]
//
// Every window is checked first (types, a settled value that is an integer);
// a bad one stops the script with an error before anything changes, so a retry
// can still settle. Then the guard is set: when it already was, the
// reservation was settled and -1 is returned. Else the member leaves every
// window (whether or not it had lapsed) and the spend is added to each window's
// settled key, which gets its TTL when it has none. Returns the number of
// windows settled.
var dollarSettleScript = redis.NewScript(`
local rs, as = ARGV[3], ARGV[4]
for i = 2, #KEYS do
  local k = KEYS[i]
  for _, c in ipairs({{k, 'string'}, {k .. rs, 'zset'}, {k .. as, 'hash'}}) do
    local ty = redis.call('TYPE', c[1]).ok
    if ty ~= 'none' and ty ~= c[2] then
      return redis.error_reply('ERR dollars: ' .. c[1] .. ' holds a ' .. ty)
    end
  end
  local v = redis.call('GET', k)
  if v and (tonumber(v) == nil or tonumber(v) ~= math.floor(tonumber(v))) then
    return redis.error_reply('ERR dollars: ' .. k .. ' holds ' .. v .. ', not micro-dollars')
  end
end
if not redis.call('SET', KEYS[1], '1', 'NX', 'PX', ARGV[5]) then
  return -1
end
local spent = tonumber(ARGV[1])
for i = 2, #KEYS do
  local k = KEYS[i]
  redis.call('ZREM', k .. rs, ARGV[2])
  redis.call('HDEL', k .. as, ARGV[2])
  if spent > 0 then
    redis.call('INCRBY', k, ARGV[1])
  end
  if redis.call('EXISTS', k) == 1 and redis.call('PTTL', k) < 0 then
    redis.call('PEXPIRE', k, ARGV[4 + i])
  end
end
return #KEYS - 1
`)

// dollarReadScript reads the global dollar windows without changing them.
//
// KEYS: none declared (the date is the server's; see reserveScript).
// ARGV[1]            -> now_ms override: "" in production (see budgetDatesLua)
// ARGV[2], ARGV[3]   -> the suffixes of a window's reservation ZSET and amount HASH
// ARGV[4+2i, 5+2i]   -> window i: prefix, kind ("d"|"w"|"m")
//
// Returns {now ms, {settled}, {held}}, one entry per window; a window of the
// wrong type or holding junk is an error.
var dollarReadScript = redis.NewScript(budgetDatesLua + dollarWindowsLua + `
local now = now_ms(ARGV[1])
if now == nil then
  return redis.error_reply('ERR dollars: now_ms override is not an epoch millisecond')
end
local day, monday, month = budget_dates(now)
local settled, held = {}, {}
for i = 4, #ARGV, 2 do
  local key = window_key(ARGV[i], ARGV[i + 1], day, monday, month)
  local s, h = dollar_read(key, key .. ARGV[2], key .. ARGV[3], now)
  if s == nil then
    return redis.error_reply('ERR dollars: ' .. h)
  end
  settled[#settled + 1] = s
  held[#held + 1] = h
end
return {string.format('%.0f', now), settled, held}
`)

// threadTurnScript lines a job up in its forge thread and answers whether it
// may run now (Threads.Turn).
//
// KEYS[1] -> thread:{<hash16>}:line, ZSET of job ids scored by enqueue ms
// KEYS[2] -> thread:{<hash16>}:seen, HASH job id -> last ask, server ms
// KEYS[3] -> thread:{<hash16>}:holder, STRING: the job id holding the thread
// ARGV[1] -> the asking job's id (checked by the caller: fleet.CheckJobID)
// ARGV[2] -> its enqueue time, epoch ms ("" when unknown: the server's now)
// ARGV[3] -> the holder's ttl in ms
// ARGV[4] -> StaleAfter in ms: a job of the line that has not asked for it
// is dropped, unless it holds the thread
// ARGV[5] -> the most jobs the line holds
// ARGV[6] -> the line's and the seen hash's life in ms: refreshed (never
// shortened) at every ask, so an abandoned thread disappears
// ARGV[7] -> the settle window in ms: the line's first takes the thread only
// once it was enqueued that long ago, so a job enqueued a moment before it
// on another host, not yet asking, lines up first
//
// In order, on the server's clock (TIME):
//  1. A key of another type gets an expiry of ARGV[6] when it has none, and
//     the script stops with an error reply naming it (the caller waits).
//  2. A job already in the line is marked seen now.
//  3. Every job of the line (its first ARGV[5]+1) not seen for ARGV[4] ms
//     that is not the holder leaves the line and the seen hash. A seen value
//     that is not a decimal count of ms, or is ahead of the clock, is
//     rewritten to now: junk may make a job wait, at most ARGV[4] longer,
//     never let it run.
//  4. A job not in the line joins it (ZADD NX, scored by ARGV[2]) and is
//     marked seen now, unless the line is full: then it is not added and
//     waits behind the holder or the line's first.
//  5. The holder is the asking job: its key is set again with PX ARGV[3]
//     and the turn granted. Another holder: the answer is behind it (a
//     holder key without expiry gets PX ARGV[3]). No holder and the asking
//     job is the line's first, enqueued at least ARGV[7] ms ago: it becomes
//     the holder (PX ARGV[3]) and the turn is granted; enqueued later, it
//     waits behind itself (settling). Else the answer is behind the line's
//     first.
//
// Returns {granted (1|0), behind ("" when granted), full (1 when the line
// was full and the job was not added), dropped (stale jobs dropped),
// repaired (seen values rewritten)}. The caller validates behind again.
var threadTurnScript = redis.NewScript(`
local line, seen, holder = KEYS[1], KEYS[2], KEYS[3]
local job, ttl = ARGV[1], ARGV[3]
local stale, max, life, settle = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local nows = string.format('%.0f', now)
for _, c in ipairs({{line, 'zset'}, {seen, 'hash'}, {holder, 'string'}}) do
  local ty = redis.call('TYPE', c[1]).ok
  if ty ~= 'none' and ty ~= c[2] then
    if redis.call('PTTL', c[1]) == -1 then
      redis.call('PEXPIRE', c[1], ARGV[6])
    end
    return redis.error_reply('ERR threads: ' .. c[1] .. ' holds a ' .. ty)
  end
end
local hold = redis.call('GET', holder)
local inline = redis.call('ZSCORE', line, job)
if inline then
  redis.call('HSET', seen, job, nows)
end
local dropped, repaired = 0, 0
local members = redis.call('ZRANGE', line, 0, max)
if #members > 0 then
  local asked = redis.call('HMGET', seen, unpack(members))
  for i, m in ipairs(members) do
    if m ~= hold then
      local a, v = asked[i], nil
      if a and string.match(a, '^%d+$') and #a <= 15 then
        v = tonumber(a)
      end
      if v == nil or v > now then
        redis.call('HSET', seen, m, nows)
        repaired = repaired + 1
      elseif now - v >= stale then
        redis.call('ZREM', line, m)
        redis.call('HDEL', seen, m)
        dropped = dropped + 1
      end
    end
  end
end
local full = 0
if not inline then
  if redis.call('ZCARD', line) >= max then
    full = 1
  else
    local score = ARGV[2]
    if score == '' then score = nows end
    redis.call('ZADD', line, 'NX', score, job)
    redis.call('HSET', seen, job, nows)
  end
end
local granted, behind = 0, ''
if hold == job then
  redis.call('SET', holder, job, 'PX', ttl)
  granted = 1
elseif hold then
  behind = hold
  if redis.call('PTTL', holder) == -1 then
    redis.call('PEXPIRE', holder, ttl)
  end
else
  local first = redis.call('ZRANGE', line, 0, 0)[1]
  if first == job and now - tonumber(redis.call('ZSCORE', line, job)) < settle then
    behind = job
  elseif first == job then
    redis.call('SET', holder, job, 'PX', ttl)
    granted = 1
  else
    behind = first or ''
  end
end
for _, k in ipairs({line, seen}) do
  if redis.call('EXISTS', k) == 1 and redis.call('PTTL', k) < life then
    redis.call('PEXPIRE', k, ARGV[6])
  end
end
return {granted, behind, full, dropped, repaired}
`)

// threadDoneScript takes a job out of its thread's line and frees the
// thread when the job holds it (Threads.Done). Running it again does
// nothing.
//
// KEYS[1] -> thread:{<hash16>}:line
// KEYS[2] -> thread:{<hash16>}:seen
// KEYS[3] -> thread:{<hash16>}:holder
// ARGV[1] -> the job's id
//
// A key of another type is left alone (Turn reports it). Returns 1 when the
// job held the thread and its key was deleted, else 0.
var threadDoneScript = redis.NewScript(`
if redis.call('TYPE', KEYS[1]).ok == 'zset' then
  redis.call('ZREM', KEYS[1], ARGV[1])
end
if redis.call('TYPE', KEYS[2]).ok == 'hash' then
  redis.call('HDEL', KEYS[2], ARGV[1])
end
if redis.call('TYPE', KEYS[3]).ok == 'string' and redis.call('GET', KEYS[3]) == ARGV[1] then
  redis.call('DEL', KEYS[3])
  return 1
end
return 0
`)
