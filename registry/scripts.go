package registry

import "github.com/redis/go-redis/v9"

// beatScript is one heartbeat: claim refresh, row replace, TTL, live member.
//
// KEYS[1] -> host:h:<name> (the row)
// KEYS[2] -> host:live
// KEYS[3] -> host:id:<name> (the name claim)
// ARGV[1] -> name (the host:live member)
// ARGV[2] -> TTL in ms, for the row and the claim
// ARGV[3] -> our claim value (JSON)
// ARGV[4] -> a holder's claim value we may take over ("" for none)
// ARGV[5] -> startedAt in ms ("" on the first beat: the server's TIME is used)
// ARGV[6..] -> field, value pairs of the row (without beatAt and startedAt)
//
// Returns {1, beatAt, startedAt} when the row was written, or {0, holder} when
// another instance holds the name ("" when the claim key is not a string), in
// which case nothing was written. The row is deleted and rewritten so a field
// from an older writer does not linger; inside one script no reader sees the
// gap, and the row never exists without its TTL.
var beatScript = redis.NewScript(`
local cur = redis.pcall('GET', KEYS[3])
if type(cur) == 'table' then
  return {0, ''}
end
if cur == false or cur == ARGV[3] or (ARGV[4] ~= '' and cur == ARGV[4]) then
  redis.call('SET', KEYS[3], ARGV[3], 'PX', ARGV[2])
else
  return {0, cur}
end
local t = redis.call('TIME')
local now = string.format('%.0f', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
local started = ARGV[5]
if started == '' then
  started = now
end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'beatAt', now, 'startedAt', started, unpack(ARGV, 6))
redis.call('PEXPIRE', KEYS[1], ARGV[2])
redis.call('SADD', KEYS[2], ARGV[1])
return {1, now, started}
`)

// leaveScript is a clean leave: it deletes the row, the member and the claim,
// but only when they are ours, so closing a Registry that lost its name (or
// never won it) cannot delete the holder's row.
//
// KEYS[1] -> host:h:<name>
// KEYS[2] -> host:live
// KEYS[3] -> host:id:<name>
// ARGV[1] -> name (the host:live member)
// ARGV[2] -> our claim value (JSON)
// ARGV[3] -> our instance id (matched against the row when the claim is gone)
//
// Returns 1 when it deleted, 0 when the name belongs to someone else.
var leaveScript = redis.NewScript(`
local cur = redis.pcall('GET', KEYS[3])
local mine = (cur == ARGV[2])
if cur == false then
  local inst = redis.pcall('HGET', KEYS[1], 'instance')
  mine = (inst == ARGV[3])
end
if not mine then
  return 0
end
redis.call('DEL', KEYS[1], KEYS[3])
redis.call('SREM', KEYS[2], ARGV[1])
return 1
`)

// readScript returns the server's TIME and every live row in one round trip,
// pruning members whose row is gone.
//
// KEYS[1] -> host:live
// ARGV[1] -> the row key prefix (host:h:); a row key is the prefix plus a member
// ARGV[2..] -> field, limit pairs: the fields to return and how many bytes of
// each to keep (a longer value is cut to limit+1 bytes, so the reader sees
// that it was too long without receiving all of it)
//
// Returns {seconds, microseconds, member1, {values...}, member2, {values...}}
// with values in ARGV order ("" for a missing field). A member is cut to 257
// bytes; no valid name is that long. A member whose key is missing or is not a
// hash is removed from host:live and not returned.
//
// The row keys are derived from the members on the server, which is what makes
// this one round trip; it is also why this script does not yet run on Valkey
// Cluster (the keys are not declared).
var readScript = redis.NewScript(`
local t = redis.call('TIME')
local out = {t[1], t[2]}
local fields, limits = {}, {}
for i = 2, #ARGV, 2 do
  fields[#fields + 1] = ARGV[i]
  limits[#limits + 1] = tonumber(ARGV[i + 1])
end
for _, m in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  local key = ARGV[1] .. m
  local ty = redis.call('TYPE', key)
  if type(ty) == 'table' then
    ty = ty.ok
  end
  if ty ~= 'hash' then
    redis.call('SREM', KEYS[1], m)
  else
    local vals = redis.call('HMGET', key, unpack(fields))
    for i = 1, #fields do
      local v = vals[i]
      if not v then
        vals[i] = ''
      elseif #v > limits[i] then
        vals[i] = string.sub(v, 1, limits[i] + 1)
      end
    end
    out[#out + 1] = string.sub(m, 1, 257)
    out[#out + 1] = vals
  end
end
return out
`)
