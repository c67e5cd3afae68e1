package fleet

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
)

// The fleet-wide slot keys, shared by the lease package that takes them and
// the worker that names them.

// CheckSlotKey is wait-check slot i: the fleet-wide PI_WAIT_CHECK_SLOTS bound.
func CheckSlotKey(i int) string { return "wait:check:" + strconv.Itoa(i) }

// ScopeSlotKey is slot i of the scope whose ScopeHash is hash16: the
// fleet-wide `concurrent` bound of a scoped-limits row.
func ScopeSlotKey(hash16 string, i int) string { return "slot:s:" + hash16 + ":" + strconv.Itoa(i) }

// ScopeHash is the first 16 hex digits of sha256(scope). A scope may contain
// ':' and '/', so it is hashed rather than used as a key segment.
func ScopeHash(scope string) string {
	sum := sha256.Sum256([]byte(scope))
	return hex.EncodeToString(sum[:8])
}
