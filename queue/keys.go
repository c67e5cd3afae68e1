package queue

import (
	"encoding/base64"
	"strings"

	"github.com/pidispatch/pidispatch/fleet"
)

// This file is the only place that formats a Valkey key. The layout is
// BullMQ's: "<prefix>:<queue>:<suffix>" for the queue's structures and
// "<prefix>:<queue>:<jobId>" for a job hash. Scripts derive a few keys from
// strings built here, as BullMQ's scripts do, because they touch jobs they
// only learn about inside the script: <jobPrefix><jobId>,
// <jobPrefix><jobId>:lock, <jobPrefix>de:<dedupId> and
// <repeat>:<schedulerId>.

// keys holds one queue's key names.
type keys struct {
	base   string // "bull:pi-jobs"
	client string // "bull:cGktam9icw==", see workerName
	queue  []string
}

// Positions of the queue keys every job-state script receives (lua/lib.lua
// names them in the same order).
const (
	kWait = iota
	kActive
	kPaused
	kDelayed
	kPrioritized
	kCompleted
	kFailed
	kMeta
	kEvents
	kMarker
	kPC
	kStalled
	kRepeat
	kID
	kCount
)

var keySuffixes = [kCount]string{
	kWait:        "wait",
	kActive:      "active",
	kPaused:      "paused",
	kDelayed:     "delayed",
	kPrioritized: "prioritized",
	kCompleted:   "completed",
	kFailed:      "failed",
	kMeta:        "meta",
	kEvents:      "events",
	kMarker:      "marker",
	kPC:          "pc",
	kStalled:     "stalled",
	kRepeat:      "repeat",
	kID:          "id",
}

func newKeys(prefix, name string) keys {
	k := keys{base: prefix + ":" + name, queue: make([]string, kCount),
		client: prefix + ":" + base64.StdEncoding.EncodeToString([]byte(name))}
	for i, s := range keySuffixes {
		k.queue[i] = k.base + ":" + s
	}
	return k
}

// scriptKeys returns the queue keys followed by extra script-specific keys,
// in a fresh slice the caller may keep.
func (k keys) scriptKeys(extra ...string) []string {
	out := make([]string, 0, kCount+len(extra))
	out = append(out, k.queue...)
	return append(out, extra...)
}

func (k keys) meta() string   { return k.queue[kMeta] }
func (k keys) marker() string { return k.queue[kMarker] }

// jobPrefix is the prefix of every job hash ("bull:pi-jobs:").
func (k keys) jobPrefix() string { return k.base + ":" }

func (k keys) dedup(dedupID string) string { return k.jobPrefix() + "de:" + dedupID }
func (k keys) scheduler(sid string) string { return k.queue[kRepeat] + ":" + sid }

// count keys for Counts, in Counts' field order.
func (k keys) wait() string        { return k.queue[kWait] }
func (k keys) active() string      { return k.queue[kActive] }
func (k keys) paused() string      { return k.queue[kPaused] }
func (k keys) delayed() string     { return k.queue[kDelayed] }
func (k keys) prioritized() string { return k.queue[kPrioritized] }
func (k keys) completed() string   { return k.queue[kCompleted] }
func (k keys) failed() string      { return k.queue[kFailed] }

// hostMetaPattern is the SCAN pattern matching the meta hash of every host
// queue under prefix ("bull:pi-jobs@*:meta"). Glob characters in the prefix
// are escaped so they match literally.
func hostMetaPattern(prefix string) string {
	return globEscape(prefix) + ":" + globEscape(fleet.HostQueuePrefix) + "*:meta"
}

// queueFromMetaKey extracts the queue name from a meta key found by SCAN, or
// reports false when the key does not have the expected shape.
func queueFromMetaKey(prefix, key string) (string, bool) {
	head, tail := prefix+":", ":meta"
	if !strings.HasPrefix(key, head) || !strings.HasSuffix(key, tail) || len(key) < len(head)+len(tail) {
		return "", false
	}
	return key[len(head) : len(key)-len(tail)], true
}

func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch r {
		case '*', '?', '[', ']', '\\':
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// workerName is the connection name (CLIENT SETNAME) BullMQ gives a
// Worker's blocking connection, "<prefix>:<base64 of the queue name>", with
// ":w:<worker>" when the worker has a name: BullMQ's getWorkers() lists
// the connections named so.
func (k keys) workerName(worker string) string {
	if worker == "" {
		return k.client
	}
	return k.client + ":w:" + worker
}
