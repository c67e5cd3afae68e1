package dispatch

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/pidispatch/pidispatch/dispatch/container"
	"github.com/pidispatch/pidispatch/dispatch/internal/exitline"
	"github.com/pidispatch/pidispatch/dispatch/internal/jobdir"
	"github.com/pidispatch/pidispatch/dispatch/internal/runclass"
	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/internal/faultpoint"
	"github.com/pidispatch/pidispatch/jobs"
)

// held is one job this worker holds the lock of.
type held struct {
	q     JobQueue
	job   *HeldJob
	token string
	spec  jobs.Job // parsed job data; zero when it did not parse
	// folder is the job's folder with every symlink resolved (folder
	// gate): the one path mounted and whose owner the job runs as.
	folder string
	rec    jobs.Record

	log      *slog.Logger      // the worker's, with the job's id and queue
	pickedUp time.Time         // when the worker took the job
	resolver string            // the secrets profile's resolver (secret-profile gate)
	secrets  map[string]string // the resolved secrets (secrets gate)
	gate     string            // the gate the job is at, for the events of a stop
	gw       GatewaySession    // the job's model gateway session, while it runs
	started  time.Time         // when the container started (zero: it did not)
	ws       Workspace         // a forge job's prepared workspace, until published
}

// handle walks one job from pickup to record: the gates in order, each
// answering with a verdict; the first verdict that stops the job is carried
// out here, else the container runs and its end is recorded. Every path ends
// in exactly one of: deferred (back to delayed, not an attempt), refused
// (recorded, returned as the job's result, never retried), completed, failed
// (recorded, retried within attempts), or dropped (the lock was lost: the
// stalled check fails the job).
func (w *Worker) handle(ctx context.Context, q JobQueue, job *HeldJob, token string) {
	h := w.pickup(q, job, token)
	v, release := w.climb(ctx, h, gates)
	started := false
	defer func() { release(started) }() // after the outcome is recorded and reported
	if v.act != actGoOn {
		w.answer(ctx, h, v)
		return
	}
	started = w.run(ctx, h)
}

// pickup starts the handling of a job just taken: its record so far and its
// log.
func (w *Worker) pickup(q JobQueue, job *HeldJob, token string) *held {
	h := &held{q: q, job: job, token: token}
	h.rec = jobs.Record{
		Queue:     q.Name(),
		JobID:     job.ID,
		Kind:      jobs.KindManual,
		Attempt:   recordAttempt(job.AttemptsMade),
		Host:      w.cfg.WorkerName,
		Image:     w.cfg.JobImage,
		StartedAt: w.tune.Now().UTC(),
	}
	h.log = w.log.With("jobId", job.ID, "queue", q.Name())
	h.pickedUp = time.Now()
	return h
}

// answer carries out the verdict of the gate that stopped the job: the one
// place a gate's decision reaches the job's queue.
func (w *Worker) answer(ctx context.Context, h *held, v verdict) {
	switch v.act {
	case actRefuse:
		w.observeJob(h, Event{Kind: EventGate, Gate: h.gate, Decision: DecisionRefuse, Reason: v.reason})
		w.refuse(ctx, h, v.reason)
	case actDefer:
		w.deferJob(ctx, h, v.delay, v.reason)
	case actFail:
		w.observeJob(h, Event{Kind: EventGate, Gate: h.gate, Decision: DecisionFail, Reason: v.reason})
		w.failNoRetry(ctx, h, v.reason)
	case actDrop:
		// Not ours any more: the stalled check fails the job, never re-run.
	}
}

// recordAttempt is the attempt a record of a job taken with made finished
// attempts names: made+1, or MaxAttempts+1 for a count no queue wrote (a
// peer's negative or absurd attemptsMade, which gateAttempts fails), so the
// record is still written.
func recordAttempt(made int) int {
	if made < 0 || made > MaxAttempts {
		return MaxAttempts + 1
	}
	return made + 1
}

// run starts the job's container, holds the lock for as long as it runs,
// then records and reports how it ended. It reports whether the container
// started: a started run has spent its budget reservation.
func (w *Worker) run(ctx context.Context, h *held) (started bool) {
	spec, cleanup, ok := w.prepareRun(ctx, h)
	if !ok {
		return false
	}
	defer cleanup()
	stopTranscript := w.keepTranscript(ctx, h, spec.OutputFile)
	end := w.runContainer(ctx, h, spec)
	stopTranscript() // stored before the record
	result := end.Result
	if spec.KeepContainer && result.Container != "" && !result.NeverStarted {
		remover := w.deps.Runtime.(containerRemover)
		defer w.removeContainer(ctx, remover, result.Container) // after the record and the report
	}
	if !result.NeverStarted {
		h.rec.StartedAt = end.StartedAt
		h.started = h.rec.StartedAt
	}
	h.rec.Spend = spendOf(h)
	if h.rec.Spend != nil {
		end.CapHit = h.rec.Spend.CapHit
	}
	w.finish(ctx, h, w.publishWorkspace(ctx, h, runclass.Of(end), end), end)
	return !result.NeverStarted
}

// prepareRun makes what the container needs beyond the gates: its user, its
// folders and its model socket. A failure here fails the attempt as
// never-started; cleanup removes what was made.
func (w *Worker) prepareRun(ctx context.Context, h *held) (spec container.Spec, cleanup func(), ok bool) {
	user, err := w.containerUser(h.folder)
	if err != nil {
		h.log.Error("job_user_failed", "err", err)
		w.fail(ctx, h, jobs.ReasonNeverStarted, nil, nil, FailOptions{})
		return container.Spec{}, nil, false
	}
	jobDir, workspace, removeDirs, err := w.prepareDirs(h)
	if err != nil {
		h.log.Error("job_dirs_failed", "err", err)
		w.fail(ctx, h, jobs.ReasonNeverStarted, nil, nil, FailOptions{})
		return container.Spec{}, nil, false
	}
	socketDir, stopSocket, err := w.modelEndpoint(ctx, h, user)
	if err != nil {
		h.log.Error("model_socket_failed", "err", err)
		w.fail(ctx, h, jobs.ReasonNeverStarted, nil, nil, FailOptions{})
		removeDirs()
		return container.Spec{}, nil, false
	}
	if !w.prepareWorkspace(ctx, h, workspace, user) {
		stopSocket()
		removeDirs()
		return container.Spec{}, nil, false
	}
	h.rec.Network = w.jobNetwork(h)
	env := make(map[string]string, len(h.secrets)+2)
	for k, v := range h.secrets {
		if !(w.gatewayOn() && isProviderKeyVar(k)) { // the gateway holds keys: none enters the container
			env[k] = v
		}
	}
	env["PI_JOB_ID"] = h.job.ID
	env["PI_WORKER_NAME"] = w.cfg.WorkerName
	_, keep := w.deps.Runtime.(containerRemover)
	return container.Spec{
		// Kept until its outcome is recorded and reported, with its output
		// beside the held note: a crash in between leaves both for the
		// restarted worker to record the real outcome from.
		KeepContainer:  keep,
		OutputFile:     w.outputFile(jobDir, keep),
		JobID:          h.job.ID,
		Worker:         w.cfg.WorkerName,
		Image:          h.rec.Image,
		Env:            env,
		JobDir:         jobDir,
		WorkspaceDir:   workspace,
		ModelSocketDir: socketDir,
		Network:        h.rec.Network,
		Memory:         w.cfg.JobMemory,
		CPUs:           w.cfg.JobCPUs,
		Timeout:        w.cfg.JobTimeout,
		User:           user,
	}, func() { stopSocket(); removeDirs() }, true
}

// runContainer runs the container, holding the job's lock for as long as it
// runs: an operator's cancel or a lost lock stops it.
func (w *Worker) runContainer(ctx context.Context, h *held, spec container.Spec) runclass.End {
	runCtx, stopRun := context.WithCancel(ctx)
	unwatch := func() {}
	if w.deps.Cancels != nil {
		unwatch = w.deps.Cancels.Watch(runCtx, h.job.ID, stopRun)
	}
	lost := make(chan struct{})
	extendDone := make(chan struct{})
	go func() {
		defer close(extendDone)
		w.keepLock(runCtx, h, stopRun, lost)
	}()
	w.observeJob(h, Event{Kind: EventStart, PickupLatency: time.Since(h.pickedUp)})
	startedAt := w.tune.Now().UTC()
	result, err := w.deps.Runtime.Run(runCtx, spec)
	stopRun()
	unwatch()
	<-extendDone
	end := runclass.End{Result: result, Err: err, StartedAt: startedAt}
	select {
	case <-lost:
		end.LockLost = true
	default:
	}
	end.OperatorCancel = w.deps.Cancels != nil && w.deps.Cancels.Cancelled(h.job.ID)
	return end
}

// finish records a classified run and reports it to the job's queue.
func (w *Worker) finish(ctx context.Context, h *held, c runclass.Class, end runclass.End) {
	// The exit line is the job's, which may print its secrets: only its
	// documented fields, none holding a secret, reach the record, the
	// mirror and the queue's return value.
	exit, telemetry := end.ExitCode(), exitline.Clean(end.Telemetry(), h.secrets, false)
	switch c.Event {
	case runclass.EventNeverStarted:
		h.log.Warn(c.Event, "exitCode", end.Result.ExitCode, "err", errString(end.Err))
	case runclass.EventRunFailed:
		h.log.Error(c.Event, "err", end.Err)
	}
	switch c.Report {
	case runclass.ReportNothing:
		// Our lock is gone: the stalled check failed the job (never re-run).
		// The container was stopped; record what we saw, report nothing.
		w.record(ctx, h, c.Outcome, c.Reason, exit, telemetry)
		w.observeJob(h, Event{Kind: EventLockLost})
	case runclass.ReportRefusal:
		w.refuse(ctx, h, c.Reason)
	case runclass.ReportPolicy:
		w.finishPolicy(ctx, h, c.Reason, exit, telemetry)
	case runclass.ReportCompleted:
		w.complete(ctx, h, exit, telemetry)
	case runclass.ReportFailed:
		w.fail(ctx, h, c.Reason, exit, telemetry, FailOptions{})
	case runclass.ReportRequeued:
		w.fail(ctx, h, c.Reason, exit, telemetry, FailOptions{FreeAttempt: true})
	}
}

// containerRemover removes a container a run kept (*runner.Docker does).
type containerRemover interface {
	RemoveContainer(ctx context.Context, name string) error
}

func (w *Worker) outputFile(jobDir string, keep bool) string {
	if !keep {
		return ""
	}
	return filepath.Join(filepath.Dir(jobDir), jobdir.OutputName)
}

func (w *Worker) removeContainer(ctx context.Context, r containerRemover, name string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := r.RemoveContainer(ctx, name); err != nil {
		w.log.Warn("job_container_remove_failed", "container", name, "err", err)
	}
}

// keepLock extends the job's lock until ctx ends. When the lock is lost, the
// run is stopped: a job whose lock expired has been (or will be) failed as
// stalled, and must not go on spending.
func (w *Worker) keepLock(ctx context.Context, h *held, stop context.CancelFunc, lost chan<- struct{}) {
	t := time.NewTicker(w.tune.LockTTL / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		err := h.q.ExtendLock(ctx, h.job.ID, h.token, w.tune.LockTTL)
		if errors.Is(err, ErrLockLost) {
			close(lost)
			stop()
			return
		}
		if err != nil && ctx.Err() == nil {
			w.log.Warn("job_lock_extend_failed", "jobId", h.job.ID, "err", err)
		}
	}
}

// takeScope takes the job's scope slot: the in-process count (one per local
// folder; the scope's concurrent limit) and, for a forge scope on a named
// host, the fleet lease. It returns a release func, or ok=false when busy.
func (w *Worker) takeScope(ctx context.Context, h *held) (release func(), ok bool) {
	scope := h.spec.Scope()
	if scope == "" {
		return func() {}, true
	}
	ceiling := 0
	if h.spec.Kind == jobs.KindLocal || h.spec.Folder != "" {
		ceiling = 1 // a folder is its own mutex: two agents in one tree collide
	}
	limit, limited := w.limits.Lookup(scope)
	if limited && limit.Concurrent > 0 && (ceiling == 0 || limit.Concurrent < ceiling) {
		ceiling = limit.Concurrent
	}
	if ceiling == 0 {
		return func() {}, true
	}
	key := "scope:" + scope
	w.mu.Lock()
	if w.inFlight[key] >= ceiling {
		w.mu.Unlock()
		return nil, false
	}
	w.inFlight[key]++
	w.mu.Unlock()
	local := func() {
		w.mu.Lock()
		w.inFlight[key]--
		if w.inFlight[key] <= 0 {
			delete(w.inFlight, key)
		}
		w.mu.Unlock()
	}

	// A path is not an identity across machines: local folders never take a
	// fleet lease (routing answers for them). Forge scopes with a limit do.
	if h.spec.Folder != "" || !limited || limit.Concurrent <= 0 || !w.cfg.WorkerNameDeclared || w.deps.Leases == nil {
		return local, true
	}
	hash := fleet.ScopeHash(scope)
	ttl := w.cfg.JobTimeout + 5*time.Minute
	handle, err := w.deps.Leases.Acquire(ctx, h.job.ID, limit.Concurrent, ttl, func(i int) string {
		return fleet.ScopeSlotKey(hash, i)
	})
	if err != nil || handle == nil {
		local()
		if err != nil {
			w.log.Warn("scope_lease_failed", "jobId", h.job.ID, "err", err)
		}
		w.log.Info("scope_busy_deferred", "jobId", h.job.ID, "where", "fleet")
		return nil, false
	}
	return func() {
		if err := handle.Release(context.WithoutCancel(ctx)); err != nil {
			w.log.Warn("scope_lease_release_failed", "jobId", h.job.ID, "err", err)
		}
		local()
	}, true
}

// prepareDirs writes the job's public description to a fresh /job folder and
// picks its workspace: the folder of a local job, else a fresh empty folder.
func (w *Worker) prepareDirs(h *held) (jobDir, workspace string, cleanup func(), err error) {
	base, err := os.MkdirTemp(w.jobsDir(), jobs.SanitizeJobID(h.job.ID)+"-")
	if err != nil {
		return "", "", nil, err
	}
	cleanup = func() { _ = os.RemoveAll(base) }
	// Beside /job, not in it: the container never sees the lock token.
	if err := jobdir.WriteNote(base, jobdir.Note{Queue: h.q.Name(), JobID: h.job.ID, Token: h.token, Attempt: h.rec.Attempt}); err != nil {
		cleanup()
		return "", "", nil, err
	}
	jobDir = filepath.Join(base, "job")
	if err := os.Mkdir(jobDir, 0o755); err != nil {
		cleanup()
		return "", "", nil, err
	}
	desc := struct {
		JobID   string `json:"jobId"`
		Attempt int    `json:"attempt"`
		Host    string `json:"host"`
		jobs.Job
	}{h.job.ID, h.rec.Attempt, w.cfg.WorkerName, h.spec}
	b, err := json.MarshalIndent(desc, "", "  ")
	if err != nil {
		cleanup()
		return "", "", nil, err
	}
	if err := os.WriteFile(filepath.Join(jobDir, "job.json"), append(b, '\n'), 0o644); err != nil {
		cleanup()
		return "", "", nil, err
	}
	workspace = h.folder
	if workspace == "" {
		workspace = filepath.Join(base, "workspace")
		if err := os.Mkdir(workspace, 0o777); err != nil {
			cleanup()
			return "", "", nil, err
		}
	}
	return jobDir, workspace, cleanup, nil
}

// jobNetwork is the network a job's container joins: none, unless the job
// asks for the configured one and, when it holds a secrets profile's values,
// that profile may have a network (PI_SECRET_NETWORK_PROFILES).
func (w *Worker) jobNetwork(h *held) string {
	if !h.spec.Network || w.cfg.JobNetwork == "" {
		return "none"
	}
	if !w.cfg.SecretNetworkAllowed(h.spec.SecretsProfile) {
		h.log.Info("job_network_withheld", "profile", h.spec.SecretsProfile, "fix", "add the profile to PI_SECRET_NETWORK_PROFILES to let its jobs join PI_JOB_NETWORK")
		return "none"
	}
	return w.cfg.JobNetwork
}

// deferJob puts the job back in delayed for d. It is not an attempt.
func (w *Worker) deferJob(ctx context.Context, h *held, d time.Duration, why jobs.Reason) {
	w.observeJob(h, Event{Kind: EventGate, Gate: h.gate, Decision: DecisionDefer, Reason: why, Delay: d, Until: w.tune.Now().Add(d)})
	if err := w.report(ctx, h, func(ctx context.Context) error { return h.q.Defer(ctx, h.job.ID, h.token, d) }); err != nil {
		// The lock expires and the stalled check decides; nothing ran.
		w.log.Error("job_defer_failed", "jobId", h.job.ID, "err", err)
	}
}

// refuse records a pre-spend refusal and returns it as the job's result: a
// refusal is an answer, not an error, so it is never retried.
func (w *Worker) refuse(ctx context.Context, h *held, reason jobs.Reason) {
	w.finishPolicy(ctx, h, reason, nil, nil)
}

// finishPolicy records a policy outcome (a refusal, exit 2, a timeout) and
// completes the job with it as the result: never retried.
func (w *Worker) finishPolicy(ctx context.Context, h *held, reason jobs.Reason, exit *int, telemetry json.RawMessage) {
	w.record(ctx, h, jobs.OutcomePolicy, reason, exit, telemetry)
	result, _ := json.Marshal(map[string]string{"outcome": jobs.OutcomePolicy, "reason": string(reason)})
	if err := w.report(ctx, h, func(ctx context.Context) error { return h.q.Complete(ctx, h.job.ID, h.token, result) }); err != nil {
		w.log.Error("job_report_failed", "jobId", h.job.ID, "err", err)
	}
	w.log.Info("job_refused", "jobId", h.job.ID, "outcome", jobs.OutcomePolicy, "reason", reason)
}

func (w *Worker) complete(ctx context.Context, h *held, exit *int, telemetry json.RawMessage) {
	w.record(ctx, h, jobs.OutcomeCompleted, jobs.ReasonCompleted, exit, telemetry)
	result := telemetry
	if len(result) == 0 {
		result = json.RawMessage(`{"outcome":"completed"}`)
	}
	if err := w.report(ctx, h, func(ctx context.Context) error { return h.q.Complete(ctx, h.job.ID, h.token, result) }); err != nil {
		w.log.Error("job_report_failed", "jobId", h.job.ID, "err", err)
	}
	w.log.Info("job_completed", "jobId", h.job.ID, "outcome", jobs.OutcomeCompleted)
}

// fail records an infrastructure failure and fails the attempt; the queue
// retries it while attempts remain.
func (w *Worker) fail(ctx context.Context, h *held, reason jobs.Reason, exit *int, telemetry json.RawMessage, opts FailOptions) {
	w.record(ctx, h, jobs.OutcomeFailed, reason, exit, telemetry)
	var retried bool
	err := w.report(ctx, h, func(ctx context.Context) (err error) {
		retried, err = h.q.Fail(ctx, h.job.ID, h.token, string(reason), opts)
		return err
	})
	if err != nil {
		w.log.Error("job_report_failed", "jobId", h.job.ID, "err", err)
	}
	w.log.Warn("job_failed", "jobId", h.job.ID, "attempt", h.rec.Attempt, "reason", reason, "retried", retried)
}

// failNoRetry records a failure that no retry can cure and fails the job
// for good.
func (w *Worker) failNoRetry(ctx context.Context, h *held, reason jobs.Reason) {
	w.record(ctx, h, jobs.OutcomeFailed, reason, nil, nil)
	err := w.report(ctx, h, func(ctx context.Context) error {
		_, err := h.q.Fail(ctx, h.job.ID, h.token, string(reason), FailOptions{NoRetry: true})
		return err
	})
	if err != nil {
		w.log.Error("job_report_failed", "jobId", h.job.ID, "err", err)
	}
	w.log.Warn("job_failed", "jobId", h.job.ID, "attempt", h.rec.Attempt, "reason", reason, "retried", false)
}

// reportBackoffMin and reportBackoffMax are the first and the longest pause
// between two attempts of a report.
const (
	reportBackoffMin = 100 * time.Millisecond
	reportBackoffMax = 2 * time.Second
)

// report delivers a state change of a held job to its queue (complete, fail,
// defer), retrying while Valkey cannot be reached. A run that ends during a
// Valkey restart or failover has still run: giving up at the first refused
// connection would leave the job active until its lock expires, and the
// stalled check would then fail a completed run as stalled, recorded twice
// (completed here, stalled by whichever host checks). The lock outlives the
// outage by up to LockTTL, so the report is tried until it lands, the queue
// answers that the job is no longer ours (lock lost, not active, gone), or
// LockTTL has passed. Each attempt is checked against the lock token by the
// queue's script, so a retry never acts on a job someone else holds, and an
// attempt whose reply was lost is answered "lock lost" by the next one.
func (w *Worker) report(ctx context.Context, h *held, op func(context.Context) error) error {
	ctx = context.WithoutCancel(ctx) // a shutting-down worker still reports
	deadline := time.Now().Add(w.tune.LockTTL)
	delay := reportBackoffMin
	for attempt := 1; ; attempt++ {
		err := op(ctx)
		if err == nil && attempt > 1 {
			w.log.Info("job_report_delivered", "jobId", h.job.ID, "queue", h.q.Name(), "attempts", attempt)
		}
		if err == nil || errors.Is(err, ErrLockLost) || errors.Is(err, ErrNotActive) ||
			errors.Is(err, ErrJobNotFound) || time.Now().Add(delay).After(deadline) {
			return err
		}
		time.Sleep(delay)
		delay = min(2*delay, reportBackoffMax)
	}
}

// record writes the run record before anything reports the outcome, then
// mirrors it fleet-wide without waiting.
func (w *Worker) record(ctx context.Context, h *held, outcome string, reason jobs.Reason, exit *int, telemetry json.RawMessage) {
	h.rec.Outcome = outcome
	h.rec.Reason = reason
	h.rec.ExitCode = exit
	h.rec.Telemetry = telemetry
	h.rec.EndedAt = w.tune.Now().UTC()
	if h.rec.Target == "" {
		h.rec.Target = "-"
	}
	w.observeFinish(h)
	if owner, mine := w.claim(ctx, h.rec); !mine {
		// Another host recorded this attempt first (its stalled check failed
		// the job while this worker was frozen): its file stays the one
		// record, and the mirror gets this run's facts, the better ones (the
		// container's real exit code and telemetry).
		w.log.Warn("run_record_claimed_elsewhere", "jobId", h.job.ID, "attempt", h.rec.Attempt, "owner", owner)
		w.mirror(ctx, h.rec)
		w.endHold(ctx, h.job.ID, h.spec.WaitFor)
		return
	}
	w.writeRecord(h.rec)
	w.mirror(ctx, h.rec)
	w.endHold(ctx, h.job.ID, h.spec.WaitFor) // the job ended: so did its hold
	faultpoint.Hit(faultpoint.RunRecorded)
}

// observeFinish reports h's end as its record says it.
func (w *Worker) observeFinish(h *held) {
	ev := Event{Kind: EventFinish, Outcome: h.rec.Outcome, Reason: h.rec.Reason}
	if !h.started.IsZero() {
		ev.Duration = h.rec.EndedAt.Sub(h.started)
	}
	if s := h.rec.Spend; s != nil {
		ev.SpendMicros, ev.Tokens, ev.Calls = s.Micros, s.Tokens.Total(), s.Calls
	}
	w.observeJob(h, ev)
}

// claimCallTimeout bounds one claim call; a claim that cannot be read in time
// counts as this host's, so a slow store never leaves an attempt unrecorded.
const claimCallTimeout = 2 * time.Second

// claim takes the fleet-wide claim of recording one attempt.
// Without a mirror, or with Valkey unreachable, this host records: a
// duplicate record is better than none.
func (w *Worker) claim(ctx context.Context, rec jobs.Record) (owner string, mine bool) {
	c := w.claims()
	if c == nil {
		return w.cfg.WorkerName, true
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), claimCallTimeout)
	defer cancel()
	owner, err := c.Claim(ctx, rec.Queue, rec.JobID, rec.Attempt, w.cfg.WorkerName)
	if err != nil {
		return w.cfg.WorkerName, true
	}
	return owner, owner == w.cfg.WorkerName
}

// releaseClaim drops this host's claim of an attempt it no longer records.
func (w *Worker) releaseClaim(ctx context.Context, rec jobs.Record) {
	if c := w.claims(); c != nil {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), claimCallTimeout)
		defer cancel()
		_ = c.ReleaseClaim(ctx, rec.Queue, rec.JobID, rec.Attempt, w.cfg.WorkerName)
	}
}

// recordClaimer decides fleet-wide which host records an attempt (*Mirror
// does).
type recordClaimer interface {
	Claim(ctx context.Context, queue, jobID string, attempt int, host string) (string, error)
	ReleaseClaim(ctx context.Context, queue, jobID string, attempt int, host string) error
}

// claims is the mirror's claimer, or nil.
func (w *Worker) claims() recordClaimer {
	c, _ := w.deps.Mirror.(recordClaimer)
	return c
}

// writeRecord writes rec to the logs dir; a failure is logged, never fatal.
func (w *Worker) writeRecord(rec jobs.Record) bool {
	if _, err := jobs.WriteRecord(w.cfg.LogsDir, rec); err != nil {
		w.log.Error("run_record_failed", "jobId", rec.JobID, "err", err)
		return false
	}
	return true
}

// mirror copies rec to the fleet's run mirror without waiting.
func (w *Worker) mirror(ctx context.Context, rec jobs.Record) {
	if w.deps.Mirror != nil {
		w.deps.Mirror.Go(ctx, rec)
	}
}

// ownRecord reads this host's record of the attempt rec names (its queue,
// job and attempt), if it has one of its own name.
func (w *Worker) ownRecord(rec jobs.Record) (jobs.Record, bool) {
	name := jobs.RecordName(rec.Queue, rec.JobID, rec.Attempt)
	have, err := jobs.ReadRecordFile(filepath.Join(w.cfg.LogsDir, name))
	return have, err == nil && jobs.OwnName(strings.TrimSuffix(name, ".json"), have)
}

// stalledLoop fails jobs whose lock expired (a crashed host's) and records
// them, on every queue this host drains.
func (w *Worker) stalledLoop(ctx, jobsCtx context.Context) {
	t := time.NewTicker(w.tune.StalledInterval)
	defer t.Stop()
	for {
		w.checkStalled(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (w *Worker) checkStalled(ctx context.Context) {
	for _, q := range w.deps.Queues {
		w.checkQueueStalled(ctx, q)
	}
}

// checkQueueStalled runs one queue's stalled check, each failed job's record
// written first (prerecordStalled) under the attempt's fleet-wide claim, so
// any number of hosts may check the same queue and one record is written.
func (w *Worker) checkQueueStalled(ctx context.Context, q JobQueue) {
	pre := w.prerecordStalled(ctx, q)
	if len(pre) > 0 {
		faultpoint.Hit(faultpoint.StalledRecorded)
	}
	st, err := q.CheckStalled(ctx)
	if err != nil {
		if ctx.Err() == nil {
			w.log.Warn("stalled_check_failed", "queue", q.Name(), "err", err)
		}
		return
	}
	for _, id := range st.Failed {
		p, ok := pre[id]
		if !ok {
			// Failed between the peek and the check: recorded after the fact.
			w.recordStalled(ctx, q, id, "job_stalled")
			continue
		}
		delete(pre, id)
		w.mirror(ctx, p.rec)
		w.endHold(ctx, id, p.waitFor)
		w.log.Warn("job_stalled", "jobId", id, "queue", q.Name(), "ranOn", p.rec.Host)
	}
	for id, p := range pre {
		w.settlePrerecord(ctx, q, id, p)
	}
}

// settlePrerecord decides a record written before a check that did not fail
// its job. Failed by another host's check: kept when this host holds the
// claim (the other host then wrote none), else removed. Still active: kept
// for the next check. Requeued or gone: removed, and the claim dropped.
func (w *Worker) settlePrerecord(ctx context.Context, q JobQueue, id string, p prerecorded) {
	if !p.created {
		return
	}
	j, err := q.Get(ctx, id)
	switch {
	case err != nil && !errors.Is(err, ErrJobNotFound):
		return // undecided: the next check looks again
	case err == nil && j.State == StateFailed && p.claimed:
		w.mirror(ctx, p.rec)
		w.endHold(ctx, id, p.waitFor)
		w.log.Warn("job_stalled", "jobId", id, "queue", q.Name(), "ranOn", p.rec.Host)
		return
	case err == nil && j.State == StateActive:
		return
	}
	_ = os.Remove(filepath.Join(w.cfg.LogsDir, jobs.RecordName(p.rec.Queue, p.rec.JobID, p.rec.Attempt)))
	if p.claimed {
		w.releaseClaim(ctx, p.rec)
	}
}

// unlockedLister is a queue that lists the jobs its next stalled check will
// act on (*queue.Queue does).
type unlockedLister interface {
	Unlocked(ctx context.Context) ([]string, error)
}

// prerecorded is a stalled record written before the stalled check.
type prerecorded struct {
	rec     jobs.Record
	created bool // this check wrote it; false: a record of the attempt was there
	claimed bool // this host holds the attempt's fleet-wide claim (with a mirror)
	waitFor []jobs.WaitCondition
}

// prerecordStalled writes, before the stalled check changes anything, the
// record of every job the check is about to fail, so a kill between the two
// never leaves a failed job without a record. A record this host already
// has of that attempt (its run's own, with the real exit code) is kept.
func (w *Worker) prerecordStalled(ctx context.Context, q JobQueue) map[string]prerecorded {
	u, ok := q.(unlockedLister)
	if !ok {
		return nil
	}
	ids, err := u.Unlocked(ctx)
	if err != nil || len(ids) == 0 {
		return nil
	}
	pre := make(map[string]prerecorded, len(ids))
	for _, id := range ids {
		job, err := q.Get(ctx, id)
		if err != nil || job == nil || job.State != StateActive {
			continue
		}
		rec, waitFor := w.stalledRecord(q.Name(), id, job, job.AttemptsMade+1)
		if have, ok := w.ownRecord(rec); ok {
			pre[id] = prerecorded{rec: have, waitFor: waitFor}
			continue
		}
		if _, mine := w.claim(ctx, rec); !mine {
			continue // another host records this attempt
		}
		if w.writeRecord(rec) {
			pre[id] = prerecorded{rec: rec, created: true, claimed: w.claims() != nil, waitFor: waitFor}
		}
	}
	return pre
}

// stalledRecord is the record of attempt of job id failed as stalled, with
// what the queue knows of it (job may be nil: removed on failure), and the
// job's wait conditions.
func (w *Worker) stalledRecord(queue, id string, job *HeldJob, attempt int) (jobs.Record, []jobs.WaitCondition) {
	now := w.tune.Now().UTC()
	rec := jobs.Record{
		Queue: queue, JobID: id, Kind: jobs.KindManual, Target: "-", Host: w.cfg.WorkerName,
		Image: w.cfg.JobImage, StartedAt: now, EndedAt: now, Attempt: max(attempt, 1),
		Outcome: jobs.OutcomeFailed, Reason: jobs.ReasonStalled,
	}
	rec.JobID, rec.JobIDQuoted = jobs.RefusedJobID(id)
	var waitFor []jobs.WaitCondition
	if job == nil {
		return rec, nil
	}
	if !job.ProcessedOn.IsZero() && !job.ProcessedOn.After(now) {
		rec.StartedAt = job.ProcessedOn.UTC()
	}
	if job.ProcessedBy != "" && fleet.ValidateName(job.ProcessedBy) == nil {
		rec.Host = job.ProcessedBy
	}
	if spec, err := jobs.ParseJob(job.Data); err == nil {
		rec.Kind, rec.Target, rec.Flow = spec.Kind, spec.Target(), spec.Flow
		if spec.Image != "" {
			rec.Image = spec.Image
		}
		waitFor = spec.WaitFor
	}
	return rec, waitFor
}

// recordStalled writes the record of a job the stalled check already failed
// (it was not seen before the check) and logs event. The record names the
// host that ran it when the queue knows.
func (w *Worker) recordStalled(ctx context.Context, q JobQueue, id, event string) {
	var rec jobs.Record
	var waitFor []jobs.WaitCondition
	if job, err := q.Get(ctx, id); err == nil && job != nil {
		rec, waitFor = w.stalledRecord(q.Name(), id, job, job.AttemptsMade) // the failure counted the attempt
	} else {
		rec, _ = w.stalledRecord(q.Name(), id, nil, 1)
	}
	if _, ok := w.ownRecord(rec); !ok {
		if _, mine := w.claim(ctx, rec); mine {
			w.writeRecord(rec)
			w.mirror(ctx, rec)
		}
	}
	w.endHold(ctx, id, waitFor)
	w.log.Warn(event, "jobId", id, "queue", q.Name(), "ranOn", rec.Host)
	w.observe(Event{Kind: EventStalled, JobID: id, Queue: q.Name(), Attempt: rec.Attempt, Count: 1})
}
