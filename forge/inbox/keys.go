package inbox

import "github.com/pidispatch/pidispatch/jobs"

// Every Valkey key of the inbox is formatted here and nowhere else. Each
// carries its forge as a hash tag ({github}), so the keys one script touches
// (a delivery's and its forge's queues) share a Valkey Cluster slot:
//
//	inbox:{<forge>}:body:<key> STRING, EX 35 days: a delivery of the key
//	                            (Delivery.Key, the digest of its body) was
//	                            stored (server µs of receipt); another
//	                            delivery of the body, under any id, is a
//	                            duplicate while it lives.
//	inbox:{<forge>}:seen:<id>  STRING: a delivery id stored before deliveries
//	                            had keys, with its 35-day TTL; still read, so
//	                            the forge's redelivery of one is a duplicate.
//	inbox:{<forge>}:d:<key>    HASH, EX EntryTTL: one stored delivery until it
//	                            is done: env (the Encode form), recv (server µs
//	                            of receipt), tries (claims so far), token (the
//	                            lease holder's), why (the last retry's reason).
//	inbox:{<forge>}:due        ZSET: keys waiting, scored by when they are due
//	                            (server µs); a new one is due at once.
//	inbox:{<forge>}:run        ZSET: keys being processed, scored by when the
//	                            lease ends (server µs); past it, another
//	                            processor takes the key again. An entry
//	                            stored before keys existed is under its
//	                            delivery id instead.
const keyPrefix = "inbox:{"

func forgeTag(f jobs.Forge) string { return keyPrefix + string(f) + "}:" }

func bodyKey(f jobs.Forge, key string) string { return forgeTag(f) + "body:" + key }
func seenKey(f jobs.Forge, id string) string  { return forgeTag(f) + "seen:" + id }
func entryKey(f jobs.Forge, id string) string { return forgeTag(f) + "d:" + id }
func dueKey(f jobs.Forge) string              { return forgeTag(f) + "due" }
func runKey(f jobs.Forge) string              { return forgeTag(f) + "run" }
