package fleet

import (
	"crypto/rand"
	"encoding/hex"
)

// NewToken returns a job lock token: 16 random bytes in hex, unguessable, so
// only the process that fetched a job can complete, fail or extend it. Every
// consumer of the queue (the worker and the queue's own callers) takes its
// tokens here.
func NewToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never returns an error
	return hex.EncodeToString(b[:])
}
