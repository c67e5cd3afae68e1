package lease

import "github.com/redis/go-redis/v9"

// acquireScript takes the first free slot, in the order given.
//
// KEYS[1..n] -> the slot keys, in probe order (from the start index, wrapping)
// ARGV[1]    -> the holder value, "<worker>#<id>"
// ARGV[2]    -> the TTL in ms
//
// Returns the 1-based index into KEYS of the slot taken, or 0 when all are
// held. A slot already holding ARGV[1] is held like any other (SET NX).
var acquireScript = redis.NewScript(`
for i, key in ipairs(KEYS) do
  if redis.call('SET', key, ARGV[1], 'NX', 'PX', ARGV[2]) then
    return i
  end
end
return 0
`)

// releaseScript deletes a slot only while it holds our value.
//
// KEYS[1] -> the slot key
// ARGV[1] -> the holder value
//
// Returns 1 when it deleted, 0 when the slot was not ours (or gone).
var releaseScript = redis.NewScript(`
if redis.pcall('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
`)

// refreshScript extends a slot's TTL only while it holds our value.
//
// KEYS[1] -> the slot key
// ARGV[1] -> the holder value
// ARGV[2] -> the new TTL in ms
//
// Returns 1 when it extended, 0 when the slot was not ours (or gone).
var refreshScript = redis.NewScript(`
if redis.pcall('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
`)

// sweepScript deletes every given slot whose holder starts with a prefix.
//
// KEYS[1..n] -> scope slot keys
// ARGV[1]    -> the holder prefix, "<worker>#"
//
// Returns how many it deleted. A key that is not a string is left alone.
var sweepScript = redis.NewScript(`
local n = 0
for _, key in ipairs(KEYS) do
  local v = redis.pcall('GET', key)
  if type(v) == 'string' and string.sub(v, 1, #ARGV[1]) == ARGV[1] then
    redis.call('DEL', key)
    n = n + 1
  end
end
return n
`)
