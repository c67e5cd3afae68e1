package operator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/fleetstate"
	"github.com/pidispatch/pidispatch/jobs"
	"github.com/pidispatch/pidispatch/queue"
)

// Operator cancel. A job that is not running is removed from its queue
// directly. A running job can only be stopped by the process that holds it,
// so the operator writes a durable request key (CancelRequestKey) and the
// owning worker's CancelWatcher, which polls the keys of the jobs it runs,
// consumes it, stops the job and acknowledges (CancelAckKey) with its name.
// A key rather than pub/sub: a message published during a blip is lost, a
// key waits out its TTL.

// Timings of the cancel handshake.
const (
	// DefaultCancelWait is how long Cancel waits for a worker's ack.
	DefaultCancelWait = 10 * time.Second
	// cancelRequestTTL bounds a request no worker consumes (its job ended,
	// or its worker died); Cancel withdraws it itself on timeout.
	cancelRequestTTL = 60 * time.Second
	// cancelAckPoll is how often Cancel reads the ack.
	cancelAckPoll = 250 * time.Millisecond
	// cancelCleanupTimeout bounds the withdrawal of a request after the
	// caller's ctx ended.
	cancelCleanupTimeout = 2 * time.Second
)

// Where a Cancel ended.
const (
	CancelRemoved        = "removed"         // a job that was not running was deleted from its queue
	CancelRunningStopped = "running-stopped" // the worker running it stopped it and acknowledged
	CancelNotFound       = "not-found"       // no queue has the job
	CancelTimeout        = "timeout"         // no worker acknowledged; the request was withdrawn, nothing changed
	CancelFinished       = "finished"        // the job had already completed or failed
	CancelSchedulerRun   = "scheduler-run"   // a cron scheduler's pending run: remove the trigger instead
	// CancelUnconfirmed: a worker consumed the request but no ack arrived
	// in time. The job was probably stopped; Cancel cannot prove it.
	CancelUnconfirmed = "unconfirmed"
)

// CancelResult says what Cancel did.
type CancelResult struct {
	// Where is one of the Cancel* outcomes.
	Where string
	// Queue is the queue the job was found on ("" when not found).
	Queue string
	// Host is the worker that stopped the job (CancelRunningStopped), as it
	// acknowledged; "" when its ack was not a valid worker name.
	Host string
	// State is the job's state when Cancel found it.
	State queue.State
	// SchedulerID is set for CancelSchedulerRun.
	SchedulerID string
	// Record is the run record of a removed job (CancelRemoved): the attempt
	// it would have run next, policy / operator-cancel. It is mirrored
	// fleet-wide and, with CancelOptions.LogsDir, written to RecordPath. Nil
	// for every other outcome (a stopped job is recorded by its worker).
	Record *jobs.Record
	// RecordPath is the record file written; "" when none was.
	RecordPath string
	// RecordErr says why the record of a removed job could not be written
	// or mirrored; the job is removed all the same.
	RecordErr error
}

// CancelOptions tunes CancelWith. The zero value waits DefaultCancelWait and
// records a removal in the run mirror only, under this machine's name.
type CancelOptions struct {
	// Wait is how long to wait for a running job's worker to acknowledge.
	Wait time.Duration
	// Host names the canceller in a removed job's record; "" or an invalid
	// name is this machine's sanitized hostname.
	Host string
	// LogsDir, when set (an absolute path), receives the record file of a
	// removed job, as a worker's PI_LOGS_DIR does.
	LogsDir string
}

// Changed reports whether the job is gone or stopped.
func (r CancelResult) Changed() bool {
	return r.Where == CancelRemoved || r.Where == CancelRunningStopped
}

// Cancel finds jobID on the shared queue and every host queue and stops it:
// a job waiting (or paused, delayed, prioritized) is removed and recorded
// in the run mirror (CancelWith also writes the record file); a running job is stopped by its worker through the request /
// ack handshake, waiting up to wait (DefaultCancelWait when 0) for the ack;
// its run record then says operator-cancel. A finished job, a scheduler's
// pending run, or an ack that does not come change nothing, and say so in
// Where. The error is for Valkey failures only.
func Cancel(ctx context.Context, client redis.UniversalClient, jobID string, wait time.Duration) (CancelResult, error) {
	return CancelWith(ctx, client, jobID, CancelOptions{Wait: wait})
}

// CancelWith is Cancel with options: where a removed job's record goes, and
// whose name it carries. A removed job is recorded once it is removed (a
// removal that did not happen is never recorded): the trace of a job
// cancelled while it waited, for instance for its retry.
func CancelWith(ctx context.Context, client redis.UniversalClient, jobID string, opts CancelOptions) (CancelResult, error) {
	wait := opts.Wait
	if client == nil {
		return CancelResult{}, errors.New("dispatch: nil client")
	}
	if err := checkCancelJobID(jobID); err != nil {
		return CancelResult{}, err
	}
	if wait <= 0 {
		wait = DefaultCancelWait
	}
	dir, err := queue.NewDirectory(client, queue.Config{})
	if err != nil {
		return CancelResult{}, err
	}
	name, job, err := dir.Find(ctx, jobID)
	if errors.Is(err, queue.ErrNotFound) {
		return CancelResult{Where: CancelNotFound}, nil
	}
	if err != nil {
		return CancelResult{}, fmt.Errorf("cancel %q: %w", jobID, err)
	}
	res := CancelResult{Queue: name, State: job.State, SchedulerID: job.SchedulerID}
	switch job.State {
	case queue.StateCompleted, queue.StateFailed:
		res.Where = CancelFinished
		return res, nil
	case queue.StateActive:
		return stopRunning(ctx, client, dir, jobID, wait, res)
	}
	q, err := dir.Queue(name)
	if err != nil {
		return res, err
	}
	switch err := q.Remove(ctx, jobID); {
	case err == nil:
		res.Where = CancelRemoved
		recordCancel(ctx, client, job, opts, &res)
		// A held job leaves its hold state behind; nothing would end it now.
		if err := fleetstate.RemoveHold(ctx, client, jobID); err != nil {
			return res, fmt.Errorf("cancel %q: removed from %s, but its hold state remains: %w", jobID, name, err)
		}
		return res, nil
	case errors.Is(err, queue.ErrNotFound):
		// Gone between the lookup and the removal: finished and removed by
		// retention, or removed by someone else.
		res.Where = CancelNotFound
		return res, nil
	case errors.Is(err, queue.ErrSchedulerJob):
		res.Where = CancelSchedulerRun
		return res, nil
	case errors.Is(err, queue.ErrJobLocked):
		// A worker took it between the lookup and the removal.
		res.State = queue.StateActive
		return stopRunning(ctx, client, dir, jobID, wait, res)
	default:
		return res, fmt.Errorf("cancel %q: %w", jobID, err)
	}
}

// recordCancel writes the record of a job Cancel removed: the attempt it
// would have run next, never started, policy / operator-cancel.
func recordCancel(ctx context.Context, client redis.UniversalClient, job *queue.Job, opts CancelOptions, res *CancelResult) {
	host := opts.Host
	if fleet.ValidateName(host) != nil {
		host = fleet.DefaultName()
	}
	now := time.Now().UTC()
	rec := jobs.Record{
		Kind: jobs.KindManual, Target: "-", StartedAt: now, EndedAt: now,
		Outcome: jobs.OutcomePolicy, Reason: jobs.ReasonOperatorCancel,
		Attempt: job.AttemptsMade + 1, Host: host, Queue: res.Queue,
	}
	rec.JobID, rec.JobIDQuoted = jobs.RefusedJobID(job.ID)
	if spec, err := jobs.ParseJob(job.Data); err == nil {
		rec.Kind, rec.Target, rec.Flow, rec.Image = spec.Kind, spec.Target(), spec.Flow, spec.Image
	}
	res.Record = &rec
	var errs []error
	if opts.LogsDir != "" {
		p, err := jobs.WriteRecord(opts.LogsDir, rec)
		res.RecordPath = p
		errs = append(errs, err)
	}
	errs = append(errs, fleetstate.NewMirror(client, fleetstate.MirrorConfig{}).Mirror(ctx, rec))
	res.RecordErr = errors.Join(errs...)
}

// stopRunning asks the worker that runs jobID to stop it and waits for its
// ack. On timeout it withdraws the request: if the withdrawal deleted it, no
// worker ever saw it and nothing changed; if the key was already gone, a
// worker consumed it, and the result is unconfirmed rather than "nothing".
func stopRunning(ctx context.Context, client redis.UniversalClient, dir *queue.Directory, jobID string, wait time.Duration, res CancelResult) (CancelResult, error) {
	reqKey, ackKey := fleetstate.CancelRequestKey(jobID), fleetstate.CancelAckKey(jobID)
	ttl := max(cancelRequestTTL, wait+5*time.Second)
	// A stale ack of an earlier cancel of the same id must not answer this one.
	_, err := client.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Del(ctx, ackKey)
		p.Set(ctx, reqKey, jobs.ReasonOperatorCancel, ttl)
		return nil
	})
	if err != nil {
		return res, fmt.Errorf("cancel %q: request: %w", jobID, err)
	}
	withdraw := func() (bool, error) {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cancelCleanupTimeout)
		defer cancel()
		n, err := client.Del(cctx, reqKey).Result()
		return n == 1, err
	}
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	tick := time.NewTicker(cancelAckPoll)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			if _, err := withdraw(); err != nil {
				return res, fmt.Errorf("cancel %q: %w (and withdrawing the request: %w)", jobID, ctx.Err(), err)
			}
			return res, ctx.Err()
		case <-deadline.C:
			return cancelTimedOut(ctx, client, dir, jobID, res, withdraw)
		case <-tick.C:
			host, ok, err := readAck(ctx, client, ackKey)
			if err != nil {
				return res, fmt.Errorf("cancel %q: read ack (the request expires by itself in %s): %w", jobID, ttl, err)
			}
			if ok {
				res.Where, res.Host = CancelRunningStopped, host
				return res, nil
			}
		}
	}
}

func cancelTimedOut(ctx context.Context, client redis.UniversalClient, dir *queue.Directory, jobID string, res CancelResult, withdraw func() (bool, error)) (CancelResult, error) {
	deleted, err := withdraw()
	if err != nil {
		return res, fmt.Errorf("cancel %q: withdraw the request: %w", jobID, err)
	}
	// A last look: the ack may have landed with the deadline.
	host, ok, err := readAck(ctx, client, fleetstate.CancelAckKey(jobID))
	if err != nil {
		return res, fmt.Errorf("cancel %q: read ack: %w", jobID, err)
	}
	if ok {
		res.Where, res.Host = CancelRunningStopped, host
		return res, nil
	}
	res.Where = CancelTimeout
	if !deleted {
		res.Where = CancelUnconfirmed
	}
	// The job may have ended on its own meanwhile: say so rather than
	// "timeout".
	if _, job, err := dir.Find(ctx, jobID); err == nil && (job.State == queue.StateCompleted || job.State == queue.StateFailed) {
		res.Where, res.State = CancelFinished, job.State
	}
	return res, nil
}

// readAck reads the worker's ack. Its value is peer-written: a value that is
// not a worker name is reported as an ack from an unnamed host.
func readAck(ctx context.Context, client redis.UniversalClient, key string) (host string, ok bool, err error) {
	v, err := client.Get(ctx, key).Result()
	if errors.Is(err, redis.Nil) {
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	if fleet.ValidateName(v) != nil {
		return "", true, nil
	}
	return v, true, nil
}

// ErrInvalidJobID is a job id given to Cancel that no job can have. Nothing
// is read or written for it.
var ErrInvalidJobID = errors.New("invalid job id")

// checkCancelJobID refuses an id no job can have (fleet.CheckJobID) before
// any key is built from it.
func checkCancelJobID(id string) error {
	if err := fleet.CheckJobID(id); err != nil {
		var oe *queue.OptionError
		if errors.As(err, &oe) {
			return fmt.Errorf("cancel: %w: %s", ErrInvalidJobID, oe.Reason)
		}
		return fmt.Errorf("cancel: %w: %w", ErrInvalidJobID, err)
	}
	return nil
}
