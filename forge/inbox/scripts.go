package inbox

import "github.com/redis/go-redis/v9"

// The inbox's Lua scripts. Each documents its KEYS and ARGV at its top; all
// the KEYS of one call share the forge's hash tag (keys.go). Time is always
// the Valkey server's (TIME), in microseconds, so every receiver of a fleet
// agrees on what is due and which lease has ended, whatever its own clock
// says, and deliveries stored one after the other are due in that order.
// Durations in ARGV are milliseconds.

const nowLua = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local nowstr = string.format('%.0f', now)
`

// storeScript stores a verified delivery once by its key.
//
//	KEYS[1] body:<key>  KEYS[2] d:<key>  KEYS[3] due  KEYS[4] run
//	KEYS[5] seen:<delivery id> (written before keys existed; only read)
//	ARGV[1] key  ARGV[2] the Encode form  ARGV[3] seen TTL (s)
//	ARGV[4] entry TTL (s)  ARGV[5] the inbox's length bound
//
// Returns {status, now µs}: status 'duplicate' (the body, or the id before
// keys, was stored before; nothing written), 'full' (due and run hold the
// bound already, nothing written) or 'stored' (body set, the entry written,
// the key due now).
var storeScript = redis.NewScript(nowLua + `
if redis.call('EXISTS', KEYS[1]) == 1 or redis.call('EXISTS', KEYS[5]) == 1 then
  return {'duplicate', now}
end
if redis.call('ZCARD', KEYS[3]) + redis.call('ZCARD', KEYS[4]) >= tonumber(ARGV[5]) then
  return {'full', now}
end
redis.call('SET', KEYS[1], nowstr, 'EX', ARGV[3])
redis.call('DEL', KEYS[2])
redis.call('HSET', KEYS[2], 'env', ARGV[2], 'recv', nowstr, 'tries', 0)
redis.call('EXPIRE', KEYS[2], ARGV[4])
redis.call('ZADD', KEYS[3], nowstr, ARGV[1])
return {'stored', now}
`)

// claimScript takes a due delivery for processing under a lease.
//
//	KEYS[1] due   KEYS[2] run   KEYS[3] d:<id>
//	ARGV[1] id  ARGV[2] lease (ms)  ARGV[3] the claimer's token
//
// Returns {'claimed', env, recv µs, tries, now µs}: the id moved from due to run
// with its lease ending at now + lease, the token recorded, tries counted.
// {'wait', µs}: the id is due only in that many µs. {'gone'}: the entry expired or was
// deleted (the id leaves due). {'none'}: the id is not due (another claimer
// took it).
var claimScript = redis.NewScript(nowLua + `
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not score then
  return {'none'}
end
score = tonumber(score)
if score > now then
  return {'wait', score - now}
end
redis.call('ZREM', KEYS[1], ARGV[1])
if redis.call('EXISTS', KEYS[3]) == 0 then
  return {'gone'}
end
redis.call('ZADD', KEYS[2], string.format('%.0f', now + tonumber(ARGV[2]) * 1000), ARGV[1])
redis.call('HSET', KEYS[3], 'token', ARGV[3])
local tries = redis.call('HINCRBY', KEYS[3], 'tries', 1)
local f = redis.call('HMGET', KEYS[3], 'env', 'recv')
return {'claimed', f[1], f[2], tries, now}
`)

// requeueScript gives the deliveries whose lease ended back to due: their
// processor died or stalled.
//
//	KEYS[1] run   KEYS[2] due
//	ARGV[1] how many at most
//
// Returns how many it moved; each is due at once.
var requeueScript = redis.NewScript(nowLua + `
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[1]))
for _, id in ipairs(ids) do
  redis.call('ZREM', KEYS[1], id)
  redis.call('ZADD', KEYS[2], nowstr, id)
end
return #ids
`)

// doneScript ends a delivery: processed, or given up.
//
//	KEYS[1] run   KEYS[2] due   KEYS[3] d:<id>
//	ARGV[1] id  ARGV[2] the claimer's token
//
// Returns 1, the entry deleted and the id out of both queues (body stays:
// a later delivery of the body is a duplicate); 0 when the token no longer
// holds the entry (its lease ended and another claimer took it), nothing
// changed.
var doneScript = redis.NewScript(`
if redis.call('HGET', KEYS[3], 'token') ~= ARGV[2] then
  return 0
end
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('DEL', KEYS[3])
return 1
`)

// retryScript puts a delivery back to be processed again later.
//
//	KEYS[1] run   KEYS[2] due   KEYS[3] d:<id>
//	ARGV[1] id  ARGV[2] the claimer's token  ARGV[3] delay (ms)  ARGV[4] why
//
// Returns the server µs it is due at, the id moved from run to due, the
// reason kept and the token cleared; 0 when the token no longer holds the
// entry, nothing changed.
var retryScript = redis.NewScript(nowLua + `
if redis.call('HGET', KEYS[3], 'token') ~= ARGV[2] then
  return 0
end
local due = now + tonumber(ARGV[3]) * 1000
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('ZADD', KEYS[2], string.format('%.0f', due), ARGV[1])
redis.call('HSET', KEYS[3], 'why', ARGV[4])
redis.call('HDEL', KEYS[3], 'token')
return due
`)
