package stack

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/pidispatch/pidispatch/fleet"
	"time"

	"github.com/pidispatch/pidispatch/capabilities"
	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/lease"
	"github.com/pidispatch/pidispatch/queue"
	"github.com/pidispatch/pidispatch/registry"
)

// The adapters from the Valkey implementations to the Worker's own terms
// (dispatch/held.go). Each keeps the backend's error in the chain and adds
// the dispatch condition it means, so both errors.Is checks hold.

var (
	_ dispatch.JobQueue  = (*Queue)(nil)
	_ dispatch.JobSource = (*source)(nil)
	_ dispatch.Directory = (*directory)(nil)
	_ dispatch.Finder    = (*directory)(nil)
	_ dispatch.Leaser    = leaser{}
	_ dispatch.Registry  = hostRow{}
)

var _ dispatch.NotedDeferrer = (*Queue)(nil)

// Queue is a queue.Queue as the Worker holds jobs on it.
type Queue struct{ q *queue.Queue }

// JobQueue adapts q to the Worker.
func JobQueue(q *queue.Queue) *Queue { return &Queue{q: q} }

func (a *Queue) Name() string { return a.q.Name() }

func (a *Queue) Complete(ctx context.Context, id, token string, result json.RawMessage) error {
	return queueErr(a.q.Complete(ctx, id, token, result))
}

func (a *Queue) Fail(ctx context.Context, id, token, reason string, o dispatch.FailOptions) (bool, error) {
	retried, err := a.q.Fail(ctx, id, token, reason, queue.FailOptions{NoRetry: o.NoRetry, FreeAttempt: o.FreeAttempt})
	return retried, queueErr(err)
}

func (a *Queue) Defer(ctx context.Context, id, token string, delay time.Duration) error {
	return queueErr(a.q.Defer(ctx, id, token, delay))
}

// DeferNoted defers the job keeping note on it (dispatch.NotedDeferrer).
func (a *Queue) DeferNoted(ctx context.Context, id, token string, delay time.Duration, note string) error {
	return queueErr(a.q.DeferNoted(ctx, id, token, delay, note))
}

func (a *Queue) ExtendLock(ctx context.Context, id, token string, ttl time.Duration) error {
	return queueErr(a.q.ExtendLock(ctx, id, token, ttl))
}

func (a *Queue) CheckStalled(ctx context.Context) (dispatch.Stalled, error) {
	s, err := a.q.CheckStalled(ctx)
	return dispatch.Stalled{Failed: s.Failed, Requeued: s.Requeued}, queueErr(err)
}

// Unlocked lists the jobs the next stalled check will act on, so the Worker
// records them before the check changes their state.
func (a *Queue) Unlocked(ctx context.Context) ([]string, error) {
	ids, err := a.q.Unlocked(ctx)
	return ids, queueErr(err)
}

func (a *Queue) Get(ctx context.Context, id string) (*dispatch.HeldJob, error) {
	j, err := a.q.Get(ctx, id)
	return heldJob(j), queueErr(err)
}

// heldJob is the Worker's view of j; nil for nil.
func heldJob(j *queue.Job) *dispatch.HeldJob {
	if j == nil {
		return nil
	}
	return &dispatch.HeldJob{
		ID: j.ID, Data: j.Data, DedupID: j.DedupID, AttemptsMade: j.AttemptsMade, Attempts: j.Attempts,
		ProcessedOn: j.ProcessedOn, EnqueuedAt: j.Timestamp, SchedulerID: j.SchedulerID, ProcessedBy: j.ProcessedBy,
		DeferredFailure: j.DeferredFailure, State: dispatch.JobState(j.State), Corrupt: j.Corrupt,
		Signature: j.Signature, GateWaits: j.GateWaits,
	}
}

// queueErr adds the dispatch condition a queue error means.
func queueErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, queue.ErrNotFound):
		return fmt.Errorf("%w: %w", dispatch.ErrJobNotFound, err)
	case errors.Is(err, queue.ErrLockLost):
		return fmt.Errorf("%w: %w", dispatch.ErrLockLost, err)
	case errors.Is(err, queue.ErrNotActive):
		return fmt.Errorf("%w: %w", dispatch.ErrNotActive, err)
	}
	var de *queue.DiscoveryError
	if errors.As(err, &de) {
		return &dispatch.DiscoveryError{Found: de.Found, Err: err}
	}
	return err
}

// source hands the Worker the jobs a queue.Consumer takes.
type source struct{ c *queue.Consumer }

// Source lets the Worker take jobs from c.
func Source(c *queue.Consumer) dispatch.JobSource { return source{c} }

func (s source) Next(ctx context.Context, token string) (dispatch.JobQueue, *dispatch.HeldJob, error) {
	q, j, err := s.c.Next(ctx, token)
	if err != nil || q == nil {
		return nil, heldJob(j), queueErr(err)
	}
	return JobQueue(q), heldJob(j), nil
}

func (s source) Close() error { return s.c.Close() }

// directory reaches every queue of the fleet for the Worker.
type directory struct {
	d   *queue.Directory
	key fleet.Key
}

// Directory adapts d to the Worker's Directory and Finder.
func Directory(d *queue.Directory) interface {
	dispatch.Directory
	dispatch.Finder
} {
	return directory{d: d}
}

// SigningDirectory is Directory for a host that holds the fleet key: a job
// it moves to another queue (re-homing a dead host's work) and that the key
// signed for its old queue is signed again for the new one, since a
// signature binds the queue. A job that was not validly signed moves as it
// is, and its new host refuses it as it would have been refused before.
func SigningDirectory(d *queue.Directory, key fleet.Key) interface {
	dispatch.Directory
	dispatch.Finder
} {
	return directory{d: d, key: key}
}

func (a directory) HostQueues(ctx context.Context) ([]string, error) {
	names, err := a.d.HostQueues(ctx)
	return names, queueErr(err)
}

func (a directory) Pending(ctx context.Context, name string, limit int) ([]*dispatch.HeldJob, error) {
	js, err := a.d.Pending(ctx, name, limit)
	out := make([]*dispatch.HeldJob, len(js))
	for i, j := range js {
		out[i] = heldJob(j)
	}
	return out, queueErr(err)
}

func (a directory) Move(ctx context.Context, from, to, id string) error {
	sig := ""
	if a.key.IsSet() {
		if src, err := a.d.Queue(from); err == nil {
			if j, err := src.Get(ctx, id); err == nil && a.key.VerifyJob(from, id, j.Data, j.Signature) {
				sig, _ = a.key.SignJob(to, id, j.Data)
			}
		}
	}
	return queueErr(a.d.MoveSigned(ctx, from, to, id, sig))
}

func (a directory) Queue(name string) (dispatch.JobQueue, error) {
	q, err := a.d.Queue(name)
	if err != nil {
		return nil, queueErr(err)
	}
	return JobQueue(q), nil
}

func (a directory) Find(ctx context.Context, id string) (string, *dispatch.HeldJob, error) {
	name, j, err := a.d.Find(ctx, id)
	return name, heldJob(j), queueErr(err)
}

// leaser grants the Worker fleet-wide slots from a lease.Lease.
type leaser struct{ l *lease.Lease }

// Leaser adapts l to the Worker.
func Leaser(l *lease.Lease) dispatch.Leaser { return leaser{l} }

func (a leaser) Acquire(ctx context.Context, id string, slots int, ttl time.Duration, keyFor func(int) string) (dispatch.Slot, error) {
	h, err := a.l.Acquire(ctx, id, slots, ttl, keyFor)
	if h == nil {
		return nil, err
	}
	return h, err
}

func (a leaser) SweepOwnClaims(ctx context.Context, reaped bool, rows []dispatch.ScopeRow) (int, error) {
	lr := make([]lease.ScopeRow, len(rows))
	for i, r := range rows {
		lr[i] = lease.ScopeRow{Scope: r.Scope, Concurrent: r.Concurrent}
	}
	return a.l.SweepOwnClaims(ctx, reaped, lr)
}

// hostRow is this host's registry row for the Worker.
type hostRow struct{ r *registry.Registry }

// Registry adapts r to the Worker.
func Registry(r *registry.Registry) dispatch.Registry { return hostRow{r} }

func (a hostRow) Start(ctx context.Context) error {
	err := a.r.Start(ctx)
	if errors.Is(err, registry.ErrNameInUse) {
		return fmt.Errorf("%w: %w", dispatch.ErrNameInUse, err)
	}
	return err
}

func (a hostRow) Publish(ctx context.Context) error { return a.r.Publish(ctx) }

func (a hostRow) Close(ctx context.Context) error { return a.r.Close(ctx) }

func (a hostRow) ReadLive(ctx context.Context) ([]capabilities.Host, error) {
	rows, err := a.r.ReadLive(ctx)
	return registry.CapabilityHosts(rows), err
}
