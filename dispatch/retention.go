package dispatch

import (
	"context"
	"time"

	"github.com/pidispatch/pidispatch/jobs"
)

// retentionInterval is how often the local run records, and the stores kept
// beside them, are pruned to PI_LOG_RETENTION_DAYS (first at boot).
const retentionInterval = time.Hour

// Pruner is a store kept beside the run records whose entries expire with
// them (PI_LOG_RETENTION_DAYS). When Deps.Transcripts implements it, the
// Worker's retention loop prunes it together with the records.
type Pruner interface {
	// Prune removes the entries last written before olderThan and reports
	// how many it removed.
	Prune(olderThan time.Time) (int, error)
}

// retentionLoop prunes, at boot and every retentionInterval, the local run
// records and the transcripts older than PI_LOG_RETENTION_DAYS, by the
// Worker's clock (the run mirror prunes its own copies).
func (w *Worker) retentionLoop(ctx context.Context) {
	t := time.NewTicker(retentionInterval)
	defer t.Stop()
	for {
		w.pruneOnce(w.tune.Now().AddDate(0, 0, -w.cfg.LogRetentionDays))
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// pruneOnce prunes every retained store to cutoff.
func (w *Worker) pruneOnce(cutoff time.Time) {
	older := cutoff.UTC().Format(time.RFC3339)
	n, err := jobs.PruneRecords(w.cfg.LogsDir, cutoff)
	if err != nil {
		w.log.Warn("records_prune_failed", "err", err)
	}
	if n > 0 {
		w.log.Info("records_pruned", "removed", n, "olderThan", older)
	}
	if n, err := w.pruneSessions(cutoff); err != nil {
		w.log.Warn("sessions_prune_failed", "err", err)
	} else if n > 0 {
		w.log.Info("sessions_pruned", "removed", n, "olderThan", older)
	}
	p, ok := w.deps.Transcripts.(Pruner)
	if !ok {
		return
	}
	n, err = p.Prune(cutoff)
	if err != nil {
		w.log.Warn("transcripts_prune_failed", "err", err)
	}
	if n > 0 {
		w.log.Info("transcripts_pruned", "removed", n, "olderThan", older)
	}
}
