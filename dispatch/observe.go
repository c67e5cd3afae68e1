package dispatch

import (
	"time"

	"github.com/pidispatch/pidispatch/jobs"
)

// Observer receives every decision the Worker makes about a job and every
// change it sees in its services: gate deferrals and refusals, starts and
// finishes, lock loss, stalls and reachability. The Worker's logger and the
// Prometheus metrics (package metrics) are two observers; an embedding
// program adds its own through Deps.Observers.
//
// Observe is called synchronously from the Worker's goroutines, possibly
// from several at once: it must be safe for concurrent use, must not block
// and must not keep ev's slices.
type Observer interface {
	Observe(ev Event)
}

// EventKind names what an Event reports.
type EventKind string

// The kinds of Event.
const (
	// EventGate: a gate stopped a job (Gate, Decision, Reason; Delay and
	// Until for a deferral).
	EventGate EventKind = "gate"
	// EventStart: a job's container is about to start (PickupLatency).
	EventStart EventKind = "start"
	// EventFinish: a run ended and was recorded (Outcome, Reason, Duration,
	// Spend).
	EventFinish EventKind = "finish"
	// EventLockLost: the worker lost a running job's lock.
	EventLockLost EventKind = "lock-lost"
	// EventStalled: the stalled check failed jobs whose lock expired (Count).
	EventStalled EventKind = "stalled"
	// EventReach: a service became reachable or unreachable (Service, Up).
	EventReach EventKind = "reach"
	// EventBeat: a registry beat was published or failed (Up).
	EventBeat EventKind = "beat"
)

// Decisions of an EventGate.
const (
	DecisionDefer  = "defer"
	DecisionRefuse = "refuse"
	DecisionFail   = "fail"
)

// Event is one observation. Fields not named by its Kind are zero.
type Event struct {
	Kind EventKind
	At   time.Time
	// Host is this worker's name.
	Host string
	// JobID, Queue and Attempt name the job, when the event is about one.
	JobID, Queue string
	Attempt      int
	// Gate and Decision: which gate stopped the job, and how.
	Gate, Decision string
	// Reason is the record reason (refusals, failures, finishes) or the
	// reason of a deferral.
	Reason jobs.Reason
	// Delay and Until: how long a deferral holds the job, and until when.
	Delay time.Duration
	Until time.Time
	// Outcome of a finish: completed, policy or failed.
	Outcome string
	// Duration of a finished run, from container start to end (zero when
	// no container started).
	Duration time.Duration
	// PickupLatency: from the job's pickup to its container start.
	PickupLatency time.Duration
	// SpendMicros, Tokens and Calls: what a finished run spent through the
	// gateway.
	SpendMicros, Tokens int64
	Calls               int
	// Count of a stalled event.
	Count int
	// Service of a reach event ("valkey", "docker", "registry", ...), Up
	// whether it now answers; Up of a beat is whether it landed.
	Service string
	Up      bool
	// Err is the error behind a failure, when there is one.
	Err error
}

// Observers fans one event out to several observers.
type Observers []Observer

// Observe calls each observer in order.
func (o Observers) Observe(ev Event) {
	for _, x := range o {
		x.Observe(ev)
	}
}

var _ Observer = Observers(nil)
