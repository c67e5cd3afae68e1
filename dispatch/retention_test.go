package dispatch

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/pidispatch/pidispatch/internal/testkit/logtest"
	"github.com/pidispatch/pidispatch/jobs"
)

type fakePruner struct {
	Transcripts
	cutoffs []time.Time
	n       int
	err     error
}

func (p *fakePruner) Prune(olderThan time.Time) (int, error) {
	p.cutoffs = append(p.cutoffs, olderThan)
	return p.n, p.err
}

// One pass of the retention loop prunes the records and the transcripts to
// the same cutoff, and says what each removed or why it could not.
func TestRetentionPrunesRecordsAndTranscriptsTogether(t *testing.T) {
	dir := t.TempDir()
	now := time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC)
	old := jobs.Record{JobID: "old-1", Attempt: 1, Queue: "pi-jobs", Host: "alpha", Outcome: jobs.OutcomeCompleted, Reason: jobs.ReasonCompleted,
		StartedAt: now.AddDate(0, 0, -40), EndedAt: now.AddDate(0, 0, -40)}
	path, err := jobs.WriteRecord(dir, old)
	if err != nil {
		t.Fatal(err)
	}
	stale := now.AddDate(0, 0, -40)
	if err := os.Chtimes(path, stale, stale); err != nil {
		t.Fatal(err)
	}
	var logs logtest.Buffer
	tr := &fakePruner{n: 3}
	w := &Worker{
		cfg:  Config{Settings: Settings{LogsDir: dir, LogRetentionDays: 30}},
		tune: Tuning{Now: func() time.Time { return now }},
		log:  logs.Logger(),
		deps: Deps{Transcripts: tr},
	}
	cutoff := now.AddDate(0, 0, -30)
	w.pruneOnce(cutoff)
	if len(tr.cutoffs) != 1 || !tr.cutoffs[0].Equal(cutoff) {
		t.Fatalf("transcripts pruned at %v, want once at %v", tr.cutoffs, cutoff)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the old record %s is still there (%v)", filepath.Base(path), err)
	}
	if ev := logs.Events(t, "transcripts_pruned"); len(ev) != 1 || ev[0]["removed"] != float64(3) {
		t.Fatalf("transcripts_pruned = %v", ev)
	}
	if n := logs.Count(t, "records_pruned"); n != 1 {
		t.Fatalf("records_pruned logged %d times", n)
	}

	tr.n, tr.err = 0, errors.New("disk gone")
	w.pruneOnce(cutoff)
	if n := logs.Count(t, "transcripts_prune_failed"); n != 1 {
		t.Fatalf("transcripts_prune_failed logged %d times", n)
	}
}
