package queue

import (
	"context"
	"errors"
	"fmt"
)

// Move errors.
var (
	// ErrTargetHasJob: the target queue already has a job with this id; the
	// job stays where it is.
	ErrTargetHasJob = errors.New("queue: the target queue already has this job id")
	// ErrNotPending: the job is finished (completed or failed); only waiting,
	// paused, delayed and prioritized jobs move.
	ErrNotPending = errors.New("queue: job is not pending")
)

var moveScript = buildScript("move.lua")

// MoveTo moves the job id, which no consumer may hold, from q to the queue
// to, in one atomic script: same id, data, options, attempts and due time,
// its dedup key with it. A held job (ErrJobLocked), a finished one
// (ErrNotPending), a scheduler's pending run (ErrSchedulerJob) and an id the
// target already has (ErrTargetHasJob) stay where they are. Both queues must
// share a client (and, on a cluster, a slot).
func (q *Queue) MoveTo(ctx context.Context, id string, to *Queue) error {
	return q.MoveToSigned(ctx, id, to, "")
}

// MoveToSigned is MoveTo that also replaces the job's fleet signature (the
// SignatureOpt member of its opts) by sig, in the same script, when the job
// has one: a signature binds the job to its queue, so the host that moves
// it signs it for the target. An empty sig changes nothing.
func (q *Queue) MoveToSigned(ctx context.Context, id string, to *Queue, sig string) error {
	if err := ValidateJobID(id); err != nil {
		return err
	}
	if to == nil || to.name == q.name {
		return optErr("to", "must be another queue")
	}
	if to.cfg.Prefix != q.cfg.Prefix {
		return optErr("to", "prefix %q differs from %q", to.cfg.Prefix, q.cfg.Prefix)
	}
	res, err := q.run(ctx, moveScript, to.keys.queue, id, to.keys.jobPrefix(), sig)
	if err != nil {
		return fmt.Errorf("move %q from %s to %s: %w", id, q.name, to.name, err)
	}
	switch code, _ := res.(int64); code {
	case 1:
		return nil
	case 0:
		return fmt.Errorf("move %q from %s: %w", id, q.name, ErrNotFound)
	case -4:
		return fmt.Errorf("move %q from %s: %w", id, q.name, ErrJobLocked)
	case -8:
		return fmt.Errorf("move %q from %s: %w", id, q.name, ErrSchedulerJob)
	case -9:
		return fmt.Errorf("move %q to %s: %w", id, to.name, ErrTargetHasJob)
	case -10:
		return fmt.Errorf("move %q from %s: %w", id, q.name, ErrNotPending)
	default:
		return fmt.Errorf("move %q from %s: unexpected script status %v", id, q.name, res)
	}
}

// PendingIDs returns up to limit ids of jobs waiting to run on q: ready
// (wait and paused lists, oldest first), prioritized, then delayed. It is a
// read, not a snapshot: jobs may move while it runs.
func (q *Queue) PendingIDs(ctx context.Context, limit int) ([]string, error) {
	if limit <= 0 {
		return nil, optErr("limit", "must be positive")
	}
	pipe := q.client.Pipeline()
	wait := pipe.LRange(ctx, q.keys.wait(), int64(-limit), -1)
	paused := pipe.LRange(ctx, q.keys.paused(), int64(-limit), -1)
	prio := pipe.ZRange(ctx, q.keys.prioritized(), 0, int64(limit-1))
	delayed := pipe.ZRange(ctx, q.keys.delayed(), 0, int64(limit-1))
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("pending jobs of %s: %w", q.name, err)
	}
	var out []string
	// Lists take LPUSH at the head and serve from the tail: the tail is oldest.
	for _, l := range [][]string{wait.Val(), paused.Val()} {
		for i := len(l) - 1; i >= 0; i-- {
			out = append(out, l[i])
		}
	}
	out = append(out, prio.Val()...)
	out = append(out, delayed.Val()...)
	if len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}
