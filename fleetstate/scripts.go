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
// ARGV[5+5i .. 9+5i]  -> window i, narrowest first: prefix, kind ("d"|"w"|"m"),
// cap, name (for error text), soft hold ("" for none, else the most starts the
// soft hold lets the window reach)
//
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
for i = 5, #ARGV, 5 do
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
