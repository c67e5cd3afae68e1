package dispatch

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/pidispatch/pidispatch/dispatch/container"
	"github.com/pidispatch/pidispatch/dispatch/internal/jobdir"
	"github.com/pidispatch/pidispatch/dispatch/internal/runclass"
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
	pickedUp time.Time         // when the worker took the job (the real clock, for latencies)
	resolver string            // the secrets profile's resolver (secret-profile gate)
	secrets  map[string]string // the resolved secrets (secrets gate)
	gate     string            // the gate the job is at, for the events of a stop
	gw       GatewaySession    // the job's model gateway session, while it runs
	started  time.Time         // when the container started (zero: it did not)
	ws       Workspace         // a forge job's prepared workspace, until published
	outDir   string            // the job's output folder on the host (/job/out)
	thread   string            // the forge thread the job holds (thread gate), until its final outcome
	session  string            // the job's session folder on the host (/session), "" for none
	// predicted is the job's cost predicted from history (predicted gate);
	// nil when none was made.
	predicted *jobs.Prediction

	// pickedAt is the pickup by the worker's own clock (Tuning.Now), for the
	// record; gateWaits how long the job waited in each gate before it
	// (readGateWaits); agentMs how long its container ran.
	pickedAt  time.Time
	gateWaits map[jobs.Reason]int64
	agentMs   int64
}

// handle walks one job from pickup to record, one verdict at a time: the
// gates in order, then the run (workspace, container, publish). The first
// verdict that ends the job's handling is carried out by answer, the one
// place anything reaches the queue. Every path ends in exactly one of:
// deferred (back to delayed, not an attempt), refused (recorded, returned as
// the job's result, never retried), completed, failed (recorded, retried
// within attempts, or for good), or dropped (the lock was lost: the stalled
// check fails the job).
func (w *Worker) handle(ctx context.Context, q JobQueue, job *HeldJob, token string) {
	h := w.pickup(q, job, token)
	v, release := w.climb(ctx, h, gates)
	started := false
	defer func() { release(started) }() // after the outcome is recorded and reported
	if v.act != actGoOn {
		w.observeGateStop(h, v)
		w.answer(ctx, h, v)
		return
	}
	v, started, cleanup := w.run(ctx, h)
	defer cleanup() // after the report: until then a crash leaves the held note for the restarted worker
	w.answer(ctx, h, v)
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
	h.pickedAt = h.rec.StartedAt
	h.gateWaits = w.readGateWaits(h)
	return h
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

// run prepares the job's container, runs it holding the lock for as long as
// it runs, and publishes a forge job's workspace. It returns the run's
// verdict, whether the container started (a started run has spent its
// budget reservation), and the cleanup of what it made, for after the
// verdict is reported.
func (w *Worker) run(ctx context.Context, h *held) (v verdict, started bool, cleanup func()) {
	spec, cleanup, v := w.prepareRun(ctx, h)
	if v.act != actGoOn {
		return v, false, cleanup
	}
	stopTranscript := w.keepTranscript(ctx, h, spec.OutputFile)
	end := w.runContainer(ctx, h, spec)
	stopTranscript() // stored before the record
	if result := end.Result; spec.KeepContainer && result.Container != "" && !result.NeverStarted {
		remover, removeDirs := w.deps.Runtime.(containerRemover), cleanup
		cleanup = func() { w.removeContainer(ctx, remover, result.Container); removeDirs() }
	}
	if started = !end.Result.NeverStarted; started {
		h.rec.StartedAt = end.StartedAt
		h.started = h.rec.StartedAt
		h.ranFor(end.Result)
		w.keepSession(ctx, h, h.session)
	}
	h.rec.Spend = spendOf(h)
	if h.rec.Spend != nil {
		end.CapHit = h.rec.Spend.CapHit
	}
	return w.publishWorkspace(ctx, h, w.classify(h, end)), started, cleanup
}

// prepareRun makes what the container needs beyond the gates: its user, its
// folders, its model socket and a forge job's workspace. A failure here
// fails the attempt as never-started; cleanup removes what was made.
func (w *Worker) prepareRun(ctx context.Context, h *held) (spec container.Spec, cleanup func(), v verdict) {
	cleanup = func() {}
	user, err := w.containerUser(h.folder)
	if err != nil {
		h.log.Error("job_user_failed", "err", err)
		return container.Spec{}, cleanup, failFor(jobs.ReasonNeverStarted)
	}
	jobDir, workspace, removeDirs, err := w.prepareDirs(h)
	if err != nil {
		h.log.Error("job_dirs_failed", "err", err)
		return container.Spec{}, cleanup, failFor(jobs.ReasonNeverStarted)
	}
	if h.session, err = w.prepareSession(ctx, h, filepath.Dir(jobDir), user); err != nil {
		h.log.Error("job_session_failed", "err", err)
		return container.Spec{}, removeDirs, failFor(jobs.ReasonNeverStarted)
	}
	socketDir, stopSocket, err := w.modelEndpoint(ctx, h, user)
	if err != nil {
		h.log.Error("model_socket_failed", "err", err)
		return container.Spec{}, removeDirs, failFor(jobs.ReasonNeverStarted)
	}
	cleanup = func() { stopSocket(); removeDirs() }
	if v := w.prepareWorkspace(ctx, h, workspace, user); v.act != actGoOn {
		return container.Spec{}, cleanup, v
	}
	if err := w.writeInputs(h, jobDir, user); err != nil {
		h.log.Error("job_inputs_failed", "err", err)
		return container.Spec{}, cleanup, failFor(jobs.ReasonNeverStarted)
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
		OutDir:         h.outDir,
		SessionDir:     h.session,
		Network:        h.rec.Network,
		Memory:         w.cfg.JobMemory,
		CPUs:           w.cfg.JobCPUs,
		Timeout:        w.cfg.JobTimeout,
		User:           user,
	}, cleanup, goOn
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
	w.status(ctx, h, JobStatus{State: StatusRunning})
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
	}{h.job.ID, h.rec.Attempt, w.cfg.WorkerName, w.withFlowTools(h.spec)}
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
