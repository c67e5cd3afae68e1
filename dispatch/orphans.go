package dispatch

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/pidispatch/pidispatch/queue"
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

// heldNoteName is the file, in a job's folder under the worker's jobs dir,
// naming the lock the run holds. It sits beside the mounted /job folder, so
// the container never sees the token.
const heldNoteName = "held.json"

// maxHeldNote bounds how much of a held note is read at boot.
const maxHeldNote = 4 << 10

// heldNote is the content of a held note.
type heldNote struct {
	Queue string `json:"queue"`
	JobID string `json:"jobId"`
	Token string `json:"token"`
}

// jobsDir is this worker's own folder of job folders: one per name, so two
// workers of one machine never take each other's folders for orphans.
func (w *Worker) jobsDir() string { return filepath.Join(w.tune.JobsDir, w.cfg.WorkerName) }

func writeHeldNote(dir string, n heldNote) error {
	b, err := json.Marshal(n)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, heldNoteName), b, 0o600)
}

// readHeldNote reads a job folder's note; ok is false when there is none or
// it is not one of ours (a crash before the note was written: nothing ran).
func readHeldNote(dir string) (heldNote, bool) {
	f, err := os.Open(filepath.Join(dir, heldNoteName))
	if err != nil {
		return heldNote{}, false
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxHeldNote+1))
	if err != nil || len(data) > maxHeldNote {
		return heldNote{}, false
	}
	var n heldNote
	if json.Unmarshal(data, &n) != nil || n.Queue == "" || n.JobID == "" || n.Token == "" {
		return heldNote{}, false
	}
	return n, true
}

// failOrphans fails, as stalled and without retry, the jobs a previous
// process of this worker held when it died, and removes the job folders it
// left. It acts only when the reaper proved that no container of this name
// runs and a beat proves this process holds the name (so the previous holder
// is dead, not a live namesake); otherwise the folders stay and the stalled
// check handles the jobs when their locks expire.
func (w *Worker) failOrphans(ctx context.Context, reaped bool) {
	dir := w.jobsDir()
	entries, err := os.ReadDir(dir)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			w.log.Warn("orphaned_jobs_skipped", "reason", "jobs dir unreadable", "err", err)
		}
		return
	}
	if len(entries) == 0 {
		return
	}
	switch {
	case !reaped:
		w.log.Warn("orphaned_jobs_skipped", "reason", "the reaper did not prove that no job container runs", "folders", len(entries))
		return
	case w.deps.Registry == nil:
		w.log.Warn("orphaned_jobs_skipped", "reason", "no registry to prove the name is held", "folders", len(entries))
		return
	}
	if err := w.deps.Registry.Publish(ctx); err != nil {
		w.log.Warn("orphaned_jobs_skipped", "reason", "the name is not proven held", "err", err, "folders", len(entries))
		return
	}
	failed := 0
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		jobDir := filepath.Join(dir, e.Name())
		if w.failOrphan(ctx, jobDir) {
			failed++
		}
		if err := os.RemoveAll(jobDir); err != nil {
			w.log.Warn("orphaned_job_dir_remove_failed", "dir", jobDir, "err", err)
		}
	}
	w.log.Info("orphaned_jobs_done", "folders", len(entries), "failed", failed)
}

// failOrphan fails the job a folder's note names, if the note's token still
// holds its lock; a job finished, retried or already failed by the stalled
// check is left alone.
func (w *Worker) failOrphan(ctx context.Context, jobDir string) bool {
	n, ok := readHeldNote(jobDir)
	if !ok {
		return false
	}
	var q JobQueue
	for _, c := range w.deps.Queues {
		if c.Name() == n.Queue {
			q = c
		}
	}
	if q == nil {
		return false
	}
	if _, err := q.Fail(ctx, n.JobID, n.Token, ReasonStalled, queue.FailOptions{NoRetry: true}); err != nil {
		if !errors.Is(err, queue.ErrLockLost) && !errors.Is(err, queue.ErrNotActive) && !errors.Is(err, queue.ErrNotFound) {
			w.log.Warn("orphaned_job_fail_failed", "jobId", n.JobID, "queue", n.Queue, "err", err)
		}
		return false
	}
	w.recordStalled(ctx, q, n.JobID, "job_orphan_failed")
	return true
}
