package dispatch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/pidispatch/pidispatch/agent/flows"
	"github.com/pidispatch/pidispatch/dispatch/container"
	"github.com/pidispatch/pidispatch/dispatch/internal/hold"
	"github.com/pidispatch/pidispatch/dispatch/policy"
	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/internal/reach"
	"github.com/pidispatch/pidispatch/jobs"
)

// Tuning holds the Worker's tunables that are not operator configuration.
// Zero fields take the documented defaults.
type Tuning struct {
	// LockTTL is the lock on a job this host holds; it is extended every
	// LockTTL/3 while the job runs. Default 30s (BullMQ's lockDuration).
	LockTTL time.Duration
	// StalledInterval is how often the queues are checked for jobs whose
	// lock expired. Default 30s.
	StalledInterval time.Duration
	// BusyDeferral is how long a job waits when its scope is busy. Default 5s
	// (the original's SCOPE_BUSY_RECHECK_MS).
	BusyDeferral time.Duration
	// UnreachableDeferral is how long a job waits when the budget cannot be
	// read: money fails closed. Default 30s.
	UnreachableDeferral time.Duration
	// PredictedDeferral is how long a job waits when the cost predicted for
	// it does not fit what is left of its dollar windows or its cap.
	// Default 60s.
	PredictedDeferral time.Duration
	// ShutdownGrace is how long running jobs may finish after Run's context
	// ends before their containers are stopped. Default Config.ShutdownGrace
	// (PI_SHUTDOWN_GRACE).
	ShutdownGrace time.Duration
	// RehomeInterval is how often stranded jobs on dead hosts' queues are
	// re-homed. Default 60s.
	RehomeInterval time.Duration
	// JobsDir holds, in a subfolder named after the worker, each job's /job
	// folder (job.json), the note of the lock it holds and, for jobs without
	// a folder, its workspace. A crash leaves them behind; the next boot
	// under the same name fails the jobs they name and removes them.
	// Default $TMPDIR/pi-dispatch/jobs.
	JobsDir string
	// Version is published in the registry row.
	Version string

	// WaitMaxChecks refuses a hold wait-max-checks after this many check
	// rounds. Default: the rounds the backoff schedule makes within
	// PI_WAIT_MAX_MS, and at least MinWaitMaxChecks (see hold.DefaultMaxChecks).
	WaitMaxChecks int
	// WaitMaxFaults refuses a hold wait-faults after this many faulted
	// rounds in a row. Default DefaultWaitMaxFaults (5).
	WaitMaxFaults int
	// WaitThrottleFloor is the shortest re-deferral of a check denied a slot.
	// Default DefaultWaitThrottleFloor (11s, the original's THROTTLE_FLOOR_MS).
	WaitThrottleFloor time.Duration
	// WaitIntervalOverride and WaitMaxOverride replace PI_WAIT_INTERVAL_MS
	// and PI_WAIT_MAX_MS, bypassing their floors, so tests can hold jobs for
	// milliseconds. Production never sets them: the floor of 30 s is what
	// keeps a fleet's checks from hammering the systems they ask.
	WaitIntervalOverride time.Duration
	WaitMaxOverride      time.Duration
	// Now is the local clock, used for pause windows and record times.
	// Default time.Now.
	Now func() time.Time
	// Logger receives the worker's events. Default slog.Default().
	Logger *slog.Logger
}

func (t Tuning) withDefaults() Tuning {
	if t.LockTTL <= 0 {
		t.LockTTL = 30 * time.Second
	}
	if t.StalledInterval <= 0 {
		t.StalledInterval = 30 * time.Second
	}
	if t.BusyDeferral <= 0 {
		t.BusyDeferral = 5 * time.Second
	}
	if t.UnreachableDeferral <= 0 {
		t.UnreachableDeferral = 30 * time.Second
	}
	if t.PredictedDeferral <= 0 {
		t.PredictedDeferral = time.Minute
	}
	if t.ShutdownGrace <= 0 {
		t.ShutdownGrace = 25 * time.Second
	}
	if t.RehomeInterval <= 0 {
		t.RehomeInterval = time.Minute
	}
	if t.WaitMaxFaults <= 0 {
		t.WaitMaxFaults = DefaultWaitMaxFaults
	}
	if t.WaitThrottleFloor <= 0 {
		t.WaitThrottleFloor = DefaultWaitThrottleFloor
	}
	if t.JobsDir == "" {
		t.JobsDir = filepath.Join(os.TempDir(), "pi-dispatch", "jobs")
	}
	if t.Now == nil {
		t.Now = time.Now
	}
	if t.Logger == nil {
		t.Logger = slog.Default()
	}
	return t
}

// ErrWorkerStarted is returned by a second call to Run.
var ErrWorkerStarted = errors.New("dispatch: worker already ran")

// Worker takes jobs off this host's queues, decides before spending anything
// whether each may run here and now, runs exactly one container per job, and
// records what happened. Build it with NewWorker and call Run once.
type Worker struct {
	cfg    Config
	deps   Deps
	tune   Tuning
	log    *slog.Logger
	limits policy.ScopedLimits
	pauses policy.PauseWindows
	flows  flows.Catalog

	slots chan struct{} // host-wide slots: PI_CONCURRENCY across every queue

	// checks bounds the wait checks running at once in this process; it never
	// takes the last job slot: min(PI_WAIT_CHECK_SLOTS, max(1, concurrency-1)).
	checks chan struct{}
	wait   hold.Policy

	mu       sync.Mutex
	inFlight map[string]int // running jobs per scope key (folder mutex, scope concurrency)
	started  bool

	fetch *reach.Tracker // fetch failures are logged once per transition
	obs   Observers      // the log first, then Deps.Observers
	// exited holds, from the boot reap, the exit of each job container a
	// crashed predecessor left exited, by job id (read by failOrphans).
	exited map[string]container.ExitedJob
	// undecided holds the ids of orphans failOrphans could not finish: their
	// folders and exited containers stay for the next boot.
	undecided map[string]bool
}

// NewWorker checks the configuration and the dependencies; it opens no
// file. A problem here refuses boot: the error is a *ConfigError when the
// configuration is at fault, a *MissingPartError when Deps lack a part it
// needs.
func NewWorker(cfg Config, deps Deps, tune Tuning) (*Worker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := checkDeps(cfg, deps); err != nil {
		return nil, err
	}
	if tune.ShutdownGrace <= 0 {
		tune.ShutdownGrace = cfg.ShutdownGrace
	}
	tune = tune.withDefaults()
	w := &Worker{
		cfg:      cfg,
		deps:     deps,
		tune:     tune,
		log:      tune.Logger.With("host", cfg.WorkerName),
		slots:    make(chan struct{}, cfg.Concurrency),
		checks:   make(chan struct{}, min(cfg.WaitCheckSlots, max(1, cfg.Concurrency-1))),
		wait:     newWaitPolicy(cfg, tune),
		inFlight: map[string]int{},
		limits:   cfg.ScopedLimits,
		pauses:   cfg.PauseWindows,
		flows:    cfg.Flows,
	}
	if len(w.flows.Names()) == 0 {
		w.flows = flows.Builtin()
	}
	w.fetch = reach.New(w.log, fetchEvents)
	w.obs = append(Observers{logObserver{w.log}}, deps.Observers...)
	if err := checkScopeDollars(deps, cfg.ScopedLimits); err != nil {
		return nil, err
	}
	return w, nil
}

// checkScopeDollars refuses scope rows with dollar windows the worker
// could not enforce without a dollar budget (Validate checked they come
// with a per-job cap).
func checkScopeDollars(deps Deps, l policy.ScopedLimits) error {
	for _, row := range l.Rows() {
		if row.HasDollars() && deps.Dollars == nil {
			return &MissingPartError{Part: "Deps.Dollars", Why: "PI_SCOPED_LIMITS_FILE sets a dollar window for " + row.Scope +
				", and without a dollar budget no job's cap can be held against it (wire fleetstate.NewDollars)"}
		}
	}
	return nil
}

// ErrMissingPart is wrapped by every *MissingPartError.
var ErrMissingPart = errors.New("dispatch: missing part")

// MissingPartError is NewWorker's refusal of Deps that lack a part the
// configuration needs: without it the worker would run nothing, or would
// defer or refuse every job of a kind for ever while looking healthy.
type MissingPartError struct {
	Part string // the Deps field, "Deps.Holds"
	Why  string // what the configuration asks of it, and the fix
}

func (e *MissingPartError) Error() string { return "dispatch: missing " + e.Part + ": " + e.Why }

// Unwrap makes errors.Is(err, ErrMissingPart) hold.
func (e *MissingPartError) Unwrap() error { return ErrMissingPart }

// checkDeps refuses Deps the Worker cannot work with under cfg.
func checkDeps(cfg Config, deps Deps) error {
	missing := func(part, why string) error { return &MissingPartError{Part: part, Why: why} }
	switch {
	case len(deps.Queues) == 0:
		return missing("Deps.Queues", "the worker drains no queue")
	case deps.Source == nil:
		return missing("Deps.Source", "the worker takes no job")
	case deps.Runtime == nil:
		return missing("Deps.Runtime", "the worker runs no container")
	case deps.Budget == nil:
		return missing("Deps.Budget", "no container start can be counted against the spend caps")
	case len(cfg.WaitProfiles) > 0 && deps.Holds == nil:
		// Routing sends this host the jobs that wait on its profiles; without a
		// hold store each would be deferred every UnreachableDeferral for ever.
		return missing("Deps.Holds", "PI_WAIT_PROFILES declares wait profiles, so waitFor jobs come here, "+
			"and none can be held without a hold store (wire dispatch.NewHolds)")
	case cfg.Spend.DollarWindows() && deps.Dollars == nil:
		return missing("Deps.Dollars", "PI_DAILY_COST_USD, PI_WEEKLY_COST_USD or PI_MONTHLY_COST_USD sets a dollar window, "+
			"and without a dollar budget no job's cap can be held against it (wire fleetstate.NewDollars)")
	case len(cfg.SecretProfiles) > 0 && deps.Secrets == nil:
		return missing("Deps.Secrets", "PI_SECRET_PROFILES declares secrets profiles, and without a resolver "+
			"no job of theirs can run (wire secretprofile.Resolver)")
	case ((deps.Gateway != nil && !cfg.Gateway.Off) || cfg.ModelUpstream != "") && deps.ModelSockets == nil:
		return missing("Deps.ModelSockets", "jobs get a model endpoint (a gateway or PI_MODEL_UPSTREAM), "+
			"and without model sockets none can be served (wire gateway/socket.Open)")
	case cfg.Cron && deps.Cron == nil:
		// Without a gate the host agreed to no cron set: every run of the
		// triggers it installs would be refused as cron-not-agreed.
		return missing("Deps.Cron", "PI_TRIGGERS_FILE is set, and without a cron gate every run of its "+
			"triggers is refused as cron-not-agreed (wire the gate of the cron set the host serves)")
	}
	return nil
}

// Run boots the worker and drains its queues until ctx ends, then shuts down
// gracefully: it stops fetching, lets running jobs finish for up to
// Tuning.ShutdownGrace, stops the containers of those still running, and
// leaves the registry. It returns nil after a clean shutdown, or the error
// that refused boot (a duplicate worker name: ErrNameInUse).
func (w *Worker) Run(ctx context.Context) error {
	if err := w.markStarted(); err != nil {
		return err
	}
	reaped, err := w.boot(ctx)
	if err != nil {
		return err
	}

	// jobsCtx outlives ctx by the shutdown grace: running jobs may finish.
	jobsCtx, stopJobs := context.WithCancel(context.WithoutCancel(ctx))
	defer stopJobs()

	loops := w.startLoops(ctx, jobsCtx)
	w.log.Info("worker_started",
		"version", w.tune.Version,
		"concurrency", w.cfg.Concurrency,
		"queues", w.queueNames(),
		"declared", w.cfg.WorkerNameDeclared,
		"reaped", reaped)

	var jobs sync.WaitGroup
	w.fetchLoop(ctx, jobsCtx, &jobs)

	w.drain(&jobs, stopJobs)
	stopJobs()
	loops.Wait()
	w.closeParts(ctx)
	w.log.Info("worker_stopped")
	return nil
}

// markStarted lets Run run once.
func (w *Worker) markStarted() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.started {
		return ErrWorkerStarted
	}
	w.started = true
	return nil
}

// boot prepares the folders and claims this host's place in the fleet before
// any job is taken. It reports whether the reaper proved no job container of
// ours still runs, or the error that refuses boot.
func (w *Worker) boot(ctx context.Context) (reaped bool, err error) {
	if err := PrepareLogsDir(w.cfg.LogsDir); err != nil {
		return false, err
	}
	if err := os.MkdirAll(w.jobsDir(), 0o750); err != nil {
		return false, fmt.Errorf("jobs dir %s: %w", w.jobsDir(), err)
	}
	w.recoverRecordTemps()

	// Boot order (docs/fleet.md): registry, reaper, scope-claim
	// sweep, orphaned jobs, consumers, background parts, worker_started.
	// The name is claimed first: the reaper and the sweep act on everything
	// that carries this name, so a duplicate refused only after them would
	// already have removed the live holder's containers and claims.
	if w.deps.Registry != nil {
		if err := w.deps.Registry.Start(ctx); err != nil {
			if errors.Is(err, ErrNameInUse) {
				return false, err
			}
			// Valkey down at boot never blocks it: the registry keeps beating.
			w.log.Warn("host_registry_start_degraded", "err", err)
		}
	}
	reaped = w.reap(ctx)
	w.sweep(ctx, reaped)
	if w.failOrphans(ctx, reaped) {
		w.removeExited(ctx)
	}
	return reaped, nil
}

// startLoops starts the stalled check, the re-homing, the record pruning,
// the cancel watch (for as long as jobs may run) and the background parts;
// the returned group ends with them.
func (w *Worker) startLoops(ctx, jobsCtx context.Context) *sync.WaitGroup {
	var loops sync.WaitGroup
	loops.Go(func() { w.stalledLoop(ctx, jobsCtx) })
	loops.Go(func() { w.retentionLoop(ctx) })
	loops.Go(func() { w.rehomeLoop(ctx) })
	if r, ok := w.deps.Cancels.(Background); ok {
		// Cancel requests are watched for as long as jobs may run.
		loops.Go(func() {
			if err := r.Run(jobsCtx); err != nil && jobsCtx.Err() == nil {
				w.log.Error("cancel_watch_failed", "err", err)
			}
		})
	}
	for _, b := range w.deps.Background {
		loops.Go(func() {
			if err := b.Run(ctx); err != nil && ctx.Err() == nil {
				w.log.Error("background_failed", "err", err)
			}
		})
	}
	return &loops
}

// drain gives running jobs their shutdown grace once nothing new is
// fetched, then stops the containers of those still running.
func (w *Worker) drain(jobs *sync.WaitGroup, stopJobs context.CancelFunc) {
	w.log.Info("worker_stopping", "grace", w.tune.ShutdownGrace.String())
	done := make(chan struct{})
	go func() { jobs.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(w.tune.ShutdownGrace):
		w.log.Warn("worker_stopping_jobs", "reason", "shutdown grace passed")
		stopJobs()
		<-done
	}
}

// closeParts closes the consumer, the run mirror and the registry row.
func (w *Worker) closeParts(ctx context.Context) {
	closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := w.deps.Source.Close(); err != nil {
		w.log.Warn("queue_consumer_close_failed", "err", err)
	}
	if w.deps.Mirror != nil {
		if err := w.deps.Mirror.Close(closeCtx); err != nil {
			w.log.Warn("run_mirror_close_failed", "err", err)
		}
	}
	if w.deps.Registry != nil {
		if err := w.deps.Registry.Close(closeCtx); err != nil {
			w.log.Warn("host_registry_leave_failed", "err", err)
		}
	}
}

func (w *Worker) queueNames() []string {
	names := make([]string, len(w.deps.Queues))
	for i, q := range w.deps.Queues {
		names[i] = q.Name()
	}
	return names
}

// recordTempAge is how old a record temp file must be for boot to finish or
// remove it: a write takes milliseconds, so an older one was cut by a crash.
const recordTempAge = time.Minute

// recoverRecordTemps finishes or removes the record temp files a crash left.
func (w *Worker) recoverRecordTemps() {
	done, removed, err := jobs.RecoverRecordTemps(w.cfg.LogsDir, time.Now().Add(-recordTempAge)) // file times are the real clock
	if err != nil {
		w.log.Warn("record_temps_recover_failed", "err", err)
	}
	if done+removed > 0 {
		w.log.Info("record_temps_recovered", "completed", done, "removed", removed)
	}
}

// reap removes this host's leftover job containers (a crash leaves them
// behind) and reports whether it could prove there are none.
func (w *Worker) reap(ctx context.Context) bool {
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	reap := w.deps.Runtime.Reap
	if r, ok := w.deps.Runtime.(runningReaper); ok {
		reap = r.ReapRunning // exited containers stay until their jobs are recorded
	}
	rep, err := reap(rctx, w.cfg.WorkerName)
	if err != nil || !rep.Enumerated {
		w.log.Warn("reaper_skipped", "err", errString(err))
		return false
	}
	if rep.Found > 0 || len(rep.Exited) > 0 {
		w.log.Info("reaped_containers", "found", rep.Found, "removed", rep.Removed, "exited", len(rep.Exited))
	}
	w.exited = make(map[string]container.ExitedJob, len(rep.Exited))
	for _, e := range rep.Exited {
		w.exited[e.JobID] = e
	}
	return rep.Enumerated && rep.Removed == rep.Found
}

// runningReaper reaps only running containers, leaving exited ones and
// reporting their exits (*runner.Docker does).
type runningReaper interface {
	ReapRunning(ctx context.Context, worker string) (container.ReapReport, error)
}

// removeExited removes the exited job containers the boot reap left, once
// their jobs are recorded: all but those of orphans a failure left undecided,
// which the next boot records from them.
func (w *Worker) removeExited(ctx context.Context) {
	r, ok := w.deps.Runtime.(containerRemover)
	if !ok {
		return
	}
	for id, e := range w.exited {
		if !w.undecided[id] && e.Container != "" {
			w.removeContainer(ctx, r, e.Container)
		}
	}
}

// sweep deletes this host's scope claims left by a crash, only once the
// reaper proved no job container of ours still runs.
func (w *Worker) sweep(ctx context.Context, reaped bool) {
	if !w.cfg.WorkerNameDeclared || w.deps.Leases == nil {
		return
	}
	var rows []ScopeRow
	for _, l := range w.limits.Rows() {
		if l.Concurrent > 0 {
			rows = append(rows, ScopeRow{Scope: l.Scope, Concurrent: l.Concurrent})
		}
	}
	if _, err := w.deps.Leases.SweepOwnClaims(ctx, reaped, rows); err != nil {
		w.log.Warn("scope_claims_sweep_failed", "err", err)
	}
}

// fetchLoop takes a host slot, then a job, and runs the job in its own
// goroutine; the slot is freed when the job's handling ends (a deferral
// frees it at once). It returns when ctx ends.
func (w *Worker) fetchLoop(ctx, jobsCtx context.Context, jobs *sync.WaitGroup) {
	for {
		select {
		case w.slots <- struct{}{}:
		case <-ctx.Done():
			return
		}
		token := fleet.NewToken()
		q, job, err := w.deps.Source.Next(ctx, token)
		if err != nil || job == nil {
			<-w.slots
			if ctx.Err() != nil {
				return
			}
			w.fetchFailed(err)
			select {
			case <-time.After(time.Second):
			case <-ctx.Done():
				return
			}
			continue
		}
		w.fetchRestored()
		jobs.Go(func() {
			defer func() { <-w.slots }()
			w.handle(jobsCtx, q, job, token)
		})
	}
}

// fetchEvents are the fetch loop's transitions. A fetch that returned no job
// and no error counts as failed too.
var fetchEvents = reach.Events{Down: "queue_fetch_failed", DownLevel: slog.LevelError, Up: "queue_fetch_restored"}

func (w *Worker) fetchFailed(err error) {
	if w.fetch.Fail(err) == reach.WentDown {
		w.observe(Event{Kind: EventReach, Service: "valkey", Err: err})
	}
}

func (w *Worker) fetchRestored() {
	if w.fetch.OK() == reach.CameBack {
		w.observe(Event{Kind: EventReach, Service: "valkey", Up: true})
	}
}

// observe stamps ev with the time and this host and hands it to every observer.
func (w *Worker) observe(ev Event) {
	ev.At = w.tune.Now()
	ev.Host = w.cfg.WorkerName
	w.obs.Observe(ev)
}

// observeJob is observe for an event about h's job.
func (w *Worker) observeJob(h *held, ev Event) {
	ev.JobID, ev.Queue, ev.Attempt = h.job.ID, h.q.Name(), h.rec.Attempt
	w.observe(ev)
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
