package dispatch

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"time"

	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/internal/faultpoint"
	"github.com/pidispatch/pidispatch/jobs"
)

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
