package dispatch

import (
	"context"
	"encoding/json"
	"time"

	"github.com/pidispatch/pidispatch/capabilities"
	"github.com/pidispatch/pidispatch/dispatch/container"
	"github.com/pidispatch/pidispatch/jobs"
)

// The Worker consumes its collaborators through these interfaces, defined
// here, so the composition can be tested with the real Valkey and Docker
// implementations and with small fakes alike. One place wires the concrete
// stack; docs/architecture.md gives each interface's contract.

// JobQueue is what the worker does to a job it holds on one queue.
type JobQueue interface {
	Name() string
	Complete(ctx context.Context, id, token string, result json.RawMessage) error
	Fail(ctx context.Context, id, token, reason string, opts FailOptions) (retried bool, err error)
	Defer(ctx context.Context, id, token string, delay time.Duration) error
	ExtendLock(ctx context.Context, id, token string, ttl time.Duration) error
	CheckStalled(ctx context.Context) (Stalled, error)
	Get(ctx context.Context, id string) (*HeldJob, error)
}

// JobSource hands out the next job of this host's queues, locked with token.
// It blocks until there is one or ctx ends; it is called from one goroutine.
type JobSource interface {
	Next(ctx context.Context, token string) (JobQueue, *HeldJob, error)
	Close() error
}

// Registry is this host's row in the fleet registry.
type Registry interface {
	Start(ctx context.Context) error
	Publish(ctx context.Context) error
	ReadLive(ctx context.Context) ([]capabilities.Host, error)
	Close(ctx context.Context) error
}

// Leaser grants fleet-wide slots (scope concurrency, wait checks) and sweeps
// this host's own claims at boot.
type Leaser interface {
	Acquire(ctx context.Context, id string, slots int, ttl time.Duration, keyFor func(i int) string) (Slot, error)
	SweepOwnClaims(ctx context.Context, reaped bool, rows []ScopeRow) (int, error)
}

// HoldStore keeps the hold state of jobs waiting on their waitFor conditions,
// shared by the fleet so any host continues a hold where the last check left it.
// *Holds implements it on Valkey.
type HoldStore interface {
	Begin(ctx context.Context, jobID, dedupID string, b HoldBounds) (HoldState, error)
	Throttled(ctx context.Context, jobID, dedupID string) (HoldState, error)
	Checked(ctx context.Context, jobID, dedupID string, o CheckOutcome) (HoldState, error)
	Release(ctx context.Context, jobID, dedupID string) (HoldState, error)
	Supersede(ctx context.Context, jobID string) error
	End(ctx context.Context, jobID string) error
}

// Runtime runs job containers and cleans up after a crash.
type Runtime interface {
	Run(ctx context.Context, spec container.Spec) (container.Result, error)
	Reap(ctx context.Context, worker string) (container.ReapReport, error)
	ImagePresent(ctx context.Context, image string) (bool, error)
	ImageDigest(ctx context.Context, image string) (string, error)
}

// Budgeter reserves container starts against the spend caps.
type Budgeter interface {
	Reserve(ctx context.Context, scope string, limit *ScopeLimit) (Reservation, error)
	Release(ctx context.Context, r Reservation) error
}

// RunMirror copies run records to the fleet's shared view without blocking
// the job.
type RunMirror interface {
	// Go mirrors rec in the background; the copy outlives ctx's
	// cancellation (a job cancelled at its end is still mirrored).
	Go(ctx context.Context, rec jobs.Record)
	Close(ctx context.Context) error
}

// Background is a long-running part of the worker started after its
// consumers, such as the cron reconcile and triggers-file watch. Run blocks
// until ctx ends.
type Background interface {
	Run(ctx context.Context) error
}

// CronGate decides, for every job a job scheduler made, whether this host
// agreed to run it. The stack's gate (cronsync.AdmitRun) says yes only when
// the host's own triggers file names that exact run.
type CronGate interface {
	// AdmitCron judges the run of scheduler schedulerID, with job data data,
	// taken from the named queue.
	AdmitCron(ctx context.Context, queue, schedulerID string, data json.RawMessage) CronVerdict
}

// CronVerdict is a CronGate's answer.
type CronVerdict struct {
	// Run: this host agreed to the run.
	Run bool
	// Leave: not this host's, but another host may have agreed to it; it is
	// put back on its queue for them (deferred), not refused.
	Leave bool
	// Reason says why not, for the log line.
	Reason string
}

// Deps are the Worker's collaborators: the fleet's stores (Stores, which a
// Fleet driver opens) and the host's own parts. Registry, Leases and Mirror
// may be nil: an undeclared single host runs without fleet leases or a run
// mirror, and without a registry when Valkey has none to offer.
type Deps struct {
	Stores
	Runtime Runtime
	// Background parts start after the consumers (cron reconcile, watches).
	Background []Background
	// Cron judges every job a job scheduler made before anything else runs
	// for it. Without it the host agreed to no cron set: every such job is
	// refused (cron-not-agreed), so a schedule left in Valkey never spends on
	// a host that did not ask for it. NewWorker refuses a nil Cron when
	// Config.Cron is set (the host serves a triggers file).
	Cron CronGate
	// Workspaces clones a forge job's repository before it runs and
	// publishes its changes after (forge/workspace). Nil: a forge job starts
	// in an empty workspace and nothing is published.
	Workspaces Workspaces
	// Gateway, when set, serves each job's model socket: key injection,
	// metering and the per-job caps. Without it (and with
	// Config.ModelUpstream set) the socket forwards calls unmetered.
	Gateway ModelGateway
	// Secrets runs the resolver of a job's secrets profile
	// (secretprofile.Resolver). NewWorker refuses a nil Secrets when
	// Config.SecretProfiles declares any.
	Secrets SecretResolver
	// ModelSockets opens each job's model socket (gateway/socket.Open).
	// NewWorker refuses a nil ModelSockets when jobs get a model endpoint
	// (Gateway or Config.ModelUpstream set).
	ModelSockets ModelSockets
	// Observers receive every gate decision, start, finish, lock loss, stall
	// and reachability change.
	Observers []Observer
	// Transcripts, when set, keeps each attempt's output beside its record
	// (package transcript). Nil keeps none.
	Transcripts Transcripts
	// Sessions, when set (PI_SESSION_STORE=valkey), also keeps each
	// thread's session fleet-wide, so a resume job on another host than the
	// one that ran the thread's last job continues it. Nil: sessions stay
	// in this host's logs folder only.
	Sessions SessionStore
	// Predictor, when set, predicts a job's cost from the history of runs
	// like it, and the predicted gate holds back a job whose predicted p90
	// does not fit what is left of its dollar windows or its cap. Nil (or
	// Spend.PredictOff): jobs are admitted by the plain caps alone.
	Predictor CostPredictor
}

// SessionStore keeps one value per thread (jobs.Job.Thread) for the fleet:
// the thread's last session, encoded, redacted and signed by the Worker.
// The store checks nothing of the value but its size; the Worker checks
// everything else when it comes back (sessions.go). fleetstate.Sessions
// implements it on Valkey.
type SessionStore interface {
	// PutSession stores value as thread's session for ttl, replacing the
	// one stored before. A value over MaxSessionBytes is refused with
	// ErrSessionTooLarge.
	PutSession(ctx context.Context, thread string, value []byte, ttl time.Duration) error
	// GetSession returns thread's stored value: ErrNoSession when there is
	// none, ErrSessionTooLarge, unread past the bound, when it is over
	// MaxSessionBytes.
	GetSession(ctx context.Context, thread string) ([]byte, error)
}

// JobCancels is what a worker's job handler needs from the cancel watcher.
type JobCancels interface {
	// Watch stops the job by calling cancel when an operator asks, until
	// the returned stop is called or ctx ends.
	Watch(ctx context.Context, jobID string, cancel func()) (stop func())
	// Cancelled reports whether jobID was stopped on an operator's request.
	Cancelled(jobID string) bool
}

// Threads lines up the jobs of one forge thread (an issue or a pull request:
// jobs.Job.Thread) fleet-wide, so they run one at a time, oldest first, and
// never race on the thread's branch. *fleetstate.Threads implements it on
// Valkey.
type Threads interface {
	// Turn puts job jobID, enqueued at enqueuedAt, in thread's line (once;
	// a job asking again keeps its place and is seen alive) and answers
	// whether it may run now: it may when it is the oldest live job of the
	// line and no other job holds the thread; it then holds the thread for
	// ttl. Otherwise the answer names the job it waits behind. A job in the
	// line that has not asked for StaleAfter, and holds nothing, is dropped
	// from the line (its queue lost it).
	Turn(ctx context.Context, thread, jobID string, enqueuedAt time.Time, ttl time.Duration) (ThreadTurn, error)
	// Done takes jobID out of thread's line and frees the thread when it
	// holds it. Calling it again does nothing.
	Done(ctx context.Context, thread, jobID string) error
}

// ThreadTurn is a thread's answer to a job asking for its turn.
type ThreadTurn struct {
	// Granted: the job holds the thread now.
	Granted bool
	// Behind is the job it waits behind (the holder, or an older job in the
	// line); "" when granted.
	Behind string
}
