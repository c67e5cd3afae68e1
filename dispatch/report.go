package dispatch

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"time"

	"github.com/pidispatch/pidispatch/internal/faultpoint"
	"github.com/pidispatch/pidispatch/jobs"
)

// deferJob puts the job back in delayed for d. It is not an attempt.
func (w *Worker) deferJob(ctx context.Context, h *held, d time.Duration, why jobs.Reason) {
	w.observeJob(h, Event{Kind: EventGate, Gate: h.gate, Decision: DecisionDefer, Reason: why, Delay: d, Until: w.tune.Now().Add(d)})
	w.status(ctx, h, JobStatus{State: StatusWaiting, Reason: why, Until: w.tune.Now().Add(d)})
	if err := w.report(ctx, h, func(ctx context.Context) error { return w.deferNoted(ctx, h, d, why) }); err != nil {
		// The lock expires and the stalled check decides; nothing ran.
		w.log.Error("job_defer_failed", "jobId", h.job.ID, "err", err)
	}
}

// finishPolicy records a policy outcome (a refusal, exit 2, a timeout) and
// completes the job with it as the result: never retried.
//
// Its status comes before its record, so the record of a job refused before
// it ran (no running status wrote the comment's address) carries it too.
func (w *Worker) finishPolicy(ctx context.Context, h *held, reason jobs.Reason, exit *int, telemetry json.RawMessage) {
	w.settle(h, jobs.OutcomePolicy, reason, exit, telemetry)
	w.status(ctx, h, w.finalStatus(h, StatusRefused, reason))
	w.commitRecord(ctx, h)
	result, _ := json.Marshal(map[string]string{"outcome": jobs.OutcomePolicy, "reason": string(reason)})
	if err := w.report(ctx, h, func(ctx context.Context) error { return h.q.Complete(ctx, h.job.ID, h.token, result) }); err != nil {
		w.log.Error("job_report_failed", "jobId", h.job.ID, "err", err)
	}
	w.log.Info("job_refused", "jobId", h.job.ID, "outcome", jobs.OutcomePolicy, "reason", reason)
	w.threadDone(ctx, h)
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
	w.status(ctx, h, w.finalStatus(h, StatusCompleted, jobs.ReasonCompleted))
	w.threadDone(ctx, h)
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
	if err == nil && retried {
		w.status(ctx, h, JobStatus{State: StatusRetrying, Reason: reason, Attempt: h.rec.Attempt, Attempts: max(h.job.Attempts, 1)})
	}
	if err == nil && !retried {
		w.status(ctx, h, w.finalStatus(h, StatusFailed, reason))
		w.threadDone(ctx, h)
	}
}

// threadDone frees the forge thread a job held once its outcome is final, so
// the thread's next job may run. A retried job keeps its place.
func (w *Worker) threadDone(ctx context.Context, h *held) {
	if h.thread == "" || w.deps.Threads == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), claimCallTimeout)
	defer cancel()
	if err := w.deps.Threads.Done(ctx, h.thread, h.job.ID); err != nil {
		h.log.Warn("thread_release_failed", "err", err)
	}
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
	w.settle(h, outcome, reason, exit, telemetry)
	w.commitRecord(ctx, h)
}

// settle puts the attempt's outcome in its record, not yet written.
func (w *Worker) settle(h *held, outcome string, reason jobs.Reason, exit *int, telemetry json.RawMessage) {
	h.rec.Outcome = outcome
	h.rec.Reason = reason
	h.rec.ExitCode = exit
	h.rec.Telemetry = telemetry
	h.rec.EndedAt = w.tune.Now().UTC()
	h.rec.Timings = h.timings()
	if h.rec.Target == "" {
		h.rec.Target = "-"
	}
}

// commitRecord writes the settled record, unless another host recorded the
// attempt first, and mirrors it.
func (w *Worker) commitRecord(ctx context.Context, h *held) {
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

// statusTimeout bounds one update of a forge job's status comment: the forge
// being slow must not hold the job's slot for long.
const statusTimeout = 10 * time.Second

// status shows s in a forge job's status comment, when this host serves
// the job's forge; a failure is logged, never the job's.
func (w *Worker) status(ctx context.Context, h *held, s JobStatus) {
	ws := w.deps.Workspaces
	if ws == nil || h.spec.Forge == "" || h.spec.Repo == "" || h.spec.Folder != "" || !ws.Serves(h.spec.Forge) {
		return
	}
	if s.Attempt == 0 {
		s.Attempt, s.Attempts = h.rec.Attempt, max(h.job.Attempts, 1)
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), statusTimeout)
	defer cancel()
	url, err := ws.Status(ctx, h.job.ID, h.spec, s)
	if err != nil {
		h.log.Warn("forge_status_failed", "state", s.State, "err", err)
	}
	if url != "" {
		h.rec.StatusCommentURL = url
	}
}

// finalStatus is a job's last status: its outcome and, from its record, its
// pull request, turns and spend.
func (w *Worker) finalStatus(h *held, state string, reason jobs.Reason) JobStatus {
	s := JobStatus{State: state, Reason: reason, PullRequestURL: h.rec.PullRequestURL, Outputs: h.rec.Outputs}
	var exit struct {
		Turns *int64 `json:"turns"`
	}
	if len(h.rec.Telemetry) > 0 && json.Unmarshal(h.rec.Telemetry, &exit) == nil && exit.Turns != nil {
		s.Turns = int(*exit.Turns)
	}
	if h.rec.Spend != nil {
		s.Dollars = h.rec.Spend.Dollars
	}
	return s
}
