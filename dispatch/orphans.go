package dispatch

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/pidispatch/pidispatch/dispatch/container"
	"github.com/pidispatch/pidispatch/dispatch/internal/exitline"
	"github.com/pidispatch/pidispatch/dispatch/internal/jobdir"
	"github.com/pidispatch/pidispatch/dispatch/internal/runclass"
	"github.com/pidispatch/pidispatch/internal/faultpoint"
	"github.com/pidispatch/pidispatch/jobs"
)

// A worker that crashes mid-job (killed, OOM, power loss of the process but
// not of the disk) leaves the job active on its queue, locked with a token
// only the dead process knew. The stalled check fails it once the lock
// expires: up to LockTTL plus StalledInterval later (about a minute by
// default). A worker restarted under the same name can do better: it wrote
// the queue and token of every run beside the run's /job folder before the
// container started, so at boot, once the name is proven its own and the
// reaper proved none of its containers runs, it fails those jobs as stalled
// at once, records them, and removes the folders a crash left behind.

// jobsDir is this worker's own folder of job folders: one per name, so two
// workers of one machine never take each other's folders for orphans.
func (w *Worker) jobsDir() string { return filepath.Join(w.tune.JobsDir, w.cfg.WorkerName) }

// failOrphans fails the jobs a previous process of this worker held when it
// died (as stalled and without retry, or with the real outcome of a
// container that had exited), and removes the job folders it left. It acts only when the reaper proved that no container of this name
// runs and a beat proves this process holds the name (so the previous holder
// is dead, not a live namesake); otherwise the folders stay and the stalled
// check handles the jobs when their locks expire.
//
// It reports whether the folders were dealt with (or there were none), so
// the exited containers the reap left may go.
func (w *Worker) failOrphans(ctx context.Context, reaped bool) (settled bool) {
	dir := w.jobsDir()
	entries, err := os.ReadDir(dir)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			w.log.Warn("orphaned_jobs_skipped", "reason", "jobs dir unreadable", "err", err)
			return false
		}
		return true
	}
	if len(entries) == 0 {
		return true
	}
	switch {
	case !reaped:
		w.log.Warn("orphaned_jobs_skipped", "reason", "the reaper did not prove that no job container runs", "folders", len(entries))
		return false
	case w.deps.Registry == nil:
		w.log.Warn("orphaned_jobs_skipped", "reason", "no registry to prove the name is held", "folders", len(entries))
		return false
	}
	if err := w.deps.Registry.Publish(ctx); err != nil {
		w.log.Warn("orphaned_jobs_skipped", "reason", "the name is not proven held", "err", err, "folders", len(entries))
		return false
	}
	failed, kept := 0, 0
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		jobDir := filepath.Join(dir, e.Name())
		switch w.failOrphan(ctx, jobDir) {
		case orphanFailed:
			failed++
		case orphanUndecided:
			// The evidence stays for the next boot to finish.
			kept++
			if n, ok := jobdir.ReadNote(jobDir); ok {
				if w.undecided == nil {
					w.undecided = map[string]bool{}
				}
				w.undecided[n.JobID] = true
			}
			continue
		}
		if err := os.RemoveAll(jobDir); err != nil {
			w.log.Warn("orphaned_job_dir_remove_failed", "dir", jobDir, "err", err)
		}
	}
	w.log.Info("orphaned_jobs_done", "folders", len(entries), "failed", failed, "kept", kept)
	return true
}

// failOrphan fails the job a folder's note names, if the note's token still
// holds its lock; a job finished, retried or already failed by the stalled
// check is left alone. The record comes first: this host's record of the
// attempt when it has one (the dead run wrote it, then died before
// reporting: its outcome is reported now), else a stalled one, written
// before the job is failed. A boot killed at any step is finished by the
// next one, which finds the same note.
func (w *Worker) failOrphan(ctx context.Context, jobDir string) orphanOutcome {
	n, ok := jobdir.ReadNote(jobDir)
	if !ok {
		return orphanNone
	}
	var q JobQueue
	for _, c := range w.deps.Queues {
		if c.Name() == n.Queue {
			q = c
		}
	}
	if q == nil {
		return orphanNone
	}
	job, err := q.Get(ctx, n.JobID)
	switch {
	case errors.Is(err, ErrJobNotFound):
		return orphanNone
	case err != nil:
		w.log.Warn("orphaned_job_fail_failed", "jobId", n.JobID, "queue", n.Queue, "err", err)
		return orphanUndecided
	case job == nil || job.State != StateActive:
		return orphanNone // finished, or failed by the stalled check
	}
	attempt := n.Attempt
	if attempt == 0 {
		attempt = job.AttemptsMade + 1
	}
	rec, waitFor := w.stalledRecord(n.Queue, n.JobID, job, attempt)
	w.exitedOutcome(&rec, jobDir)
	rec, had := w.ownRecordOr(rec)
	if !had {
		if _, mine := w.claim(ctx, rec); !mine {
			had = true // another host's stalled check records this attempt
		} else if !w.writeRecord(rec) {
			return orphanUndecided // no record, no state change
		}
	}
	faultpoint.Hit(faultpoint.OrphanRecorded)
	if err := w.reportOrphan(ctx, q, n, rec); err != nil {
		if !had && errors.Is(err, ErrLockLost) {
			// Someone else holds the job now (it was requeued and taken): its
			// holder records the attempt, not this boot.
			if j, gerr := q.Get(ctx, n.JobID); gerr == nil && j.State == StateActive {
				_ = os.Remove(filepath.Join(w.cfg.LogsDir, jobs.RecordName(rec.Queue, rec.JobID, rec.Attempt)))
			}
		}
		if !errors.Is(err, ErrLockLost) && !errors.Is(err, ErrNotActive) && !errors.Is(err, ErrJobNotFound) {
			w.log.Warn("orphaned_job_fail_failed", "jobId", n.JobID, "queue", n.Queue, "err", err)
			return orphanUndecided
		}
		return orphanNone
	}
	w.mirror(ctx, rec)
	w.endHold(ctx, n.JobID, waitFor)
	w.log.Warn("job_orphan_failed", "jobId", n.JobID, "queue", q.Name(), "ranOn", rec.Host, "reason", rec.Reason)
	return orphanFailed
}

// orphanOutcome is what failOrphan did with one folder.
type orphanOutcome int

const (
	orphanNone      orphanOutcome = iota // nothing to do: the folder goes
	orphanFailed                         // recorded and reported: the folder goes
	orphanUndecided                      // Valkey or the disk failed midway: the folder stays
)

// ownRecordOr returns this host's record of rec's attempt when there is one
// (had), else rec.
func (w *Worker) ownRecordOr(rec jobs.Record) (jobs.Record, bool) {
	if have, ok := w.ownRecord(rec); ok {
		return have, true
	}
	return rec, false
}

// reportOrphan reports the recorded outcome of an orphan with its dead
// holder's token: completed and policy complete the job, stalled fails it
// for good, another failure fails it as a run would (retried while attempts
// remain).
func (w *Worker) reportOrphan(ctx context.Context, q JobQueue, n jobdir.Note, rec jobs.Record) error {
	switch rec.Outcome {
	case jobs.OutcomeCompleted:
		result := rec.Telemetry
		if len(result) == 0 {
			result = json.RawMessage(`{"outcome":"completed"}`)
		}
		return q.Complete(ctx, n.JobID, n.Token, result)
	case jobs.OutcomePolicy:
		result, _ := json.Marshal(map[string]string{"outcome": jobs.OutcomePolicy, "reason": string(rec.Reason)})
		return q.Complete(ctx, n.JobID, n.Token, result)
	}
	_, err := q.Fail(ctx, n.JobID, n.Token, string(rec.Reason), FailOptions{NoRetry: rec.Reason == jobs.ReasonStalled})
	return err
}

// exitedOutcome turns a stalled record into the run's real outcome when the
// boot reap found the job's container exited: its exit code, mapped as a run
// maps it, and the telemetry of the exit line at the end of its output (the
// engine's log of it, else the output the dead worker copied).
func (w *Worker) exitedOutcome(rec *jobs.Record, jobDir string) {
	e, ok := w.exited[rec.JobID]
	if !ok {
		return
	}
	code := e.ExitCode
	rec.ExitCode = &code
	rec.Outcome, rec.Reason = runclass.Exited(code)
	// The engine's log first: the copy beside the job folder ends where the
	// dead worker stopped copying, before an exit line printed later.
	// The values of the job's secrets died with the worker that resolved
	// them: the record keeps no free text of the exit line.
	if t, ok := container.ParseExitLine(e.Stdout); ok {
		rec.Telemetry = exitline.Clean(t.Raw, nil, true)
	} else if t, ok := container.ParseExitLine(jobdir.ReadTail(filepath.Join(jobDir, jobdir.OutputName), container.TelemetryScanBytes)); ok {
		rec.Telemetry = exitline.Clean(t.Raw, nil, true)
	}
}
