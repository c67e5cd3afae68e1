package dispatch

import (
	"context"
	"encoding/json"
	"errors"
	"time"
)

// The Worker's own terms for what its queues, leases and registry hand it.
// The stack package adapts the Valkey implementations to them, so this
// package links no client code.

// HeldJob is a job as the Worker reads it from a queue.
type HeldJob struct {
	ID string
	// Data is the job's JSON payload; nil when Corrupt says it is unreadable.
	Data json.RawMessage
	// DedupID is the deduplication id the job was added with.
	DedupID string
	// AttemptsMade counts finished attempts; deferrals do not count.
	AttemptsMade int
	// Attempts is how many times the job may run (its attempts option; 0
	// when it set none, which is one). A job taken with AttemptsMade at or
	// past it is failed before it runs.
	Attempts int
	// ProcessedOn is when the job was last taken (zero when never).
	ProcessedOn time.Time
	// EnqueuedAt is when the job was added, by its queue's clock (BullMQ's
	// timestamp); a deferral keeps it. Zero when the queue does not say.
	EnqueuedAt time.Time
	// SchedulerID is set on a job scheduler's runs.
	SchedulerID string
	// ProcessedBy is the worker name that last took the job, if it gave one.
	ProcessedBy string
	// DeferredFailure is set when a peer's stalled check decided the job
	// must fail without running.
	DeferredFailure string
	// State is set by a lookup (JobQueue.Get, Finder.Find).
	State JobState
	// Corrupt is non-empty when a field could not be read; such a job is
	// failed with this reason.
	Corrupt string
	// Signature is the job's fleet signature, as its producer wrote it
	// (fleet.Key); empty when it has none.
	Signature string
	// GateWaits is the note the last deferral left on the job
	// (NotedDeferrer), as the queue holds it: anyone who writes Valkey may
	// have written it, and the Worker checks it.
	GateWaits string
}

// JobState is where a job is on its queue.
type JobState string

// The states the Worker branches on; a queue may report others (waiting,
// delayed, paused), which all mean "not finished and not held".
const (
	StateActive    JobState = "active"
	StateCompleted JobState = "completed"
	StateFailed    JobState = "failed"
	StateUnknown   JobState = "unknown"
)

// Conditions a JobQueue, Finder or Directory reports; implementations wrap
// them (errors.Is).
var (
	// ErrJobNotFound: no queue has the job.
	ErrJobNotFound = errors.New("job not found")
	// ErrLockLost: the lock token no longer holds the job.
	ErrLockLost = errors.New("job lock lost")
	// ErrNotActive: the job is not active, so it cannot be finished.
	ErrNotActive = errors.New("job is not active")
	// ErrNameInUse: Registry.Start found a live host with this name.
	ErrNameInUse = errors.New("worker name in use by a live host")
)

// FailOptions tune JobQueue.Fail.
type FailOptions struct {
	// NoRetry fails the job for good even when attempts remain.
	NoRetry bool
	// FreeAttempt retries the job whatever its attempts, without using one
	// of them: the attempt is counted (its record keeps its number) and one
	// more is granted. For a run the worker itself cut short (its shutdown),
	// which says nothing about the job.
	FreeAttempt bool
}

// Stalled is what one stalled-job check did.
type Stalled struct {
	// Failed jobs stalled too often and are failed as stalled.
	Failed []string
	// Requeued jobs went back to be taken again.
	Requeued []string
}

// DiscoveryError is a Directory.HostQueues that could not finish: Found
// holds the queues seen before it stopped, a partial list.
type DiscoveryError struct {
	Found []string
	Err   error
}

func (e *DiscoveryError) Error() string { return "queue discovery incomplete: " + e.Err.Error() }

func (e *DiscoveryError) Unwrap() error { return e.Err }

// Slot is a granted fleet-wide slot (a scope slot or a wait-check slot).
type Slot interface {
	Release(ctx context.Context) error
}

// ScopeRow is one scoped-limits row as the boot sweep of leases reads it.
type ScopeRow struct {
	Scope      string
	Concurrent int
}
