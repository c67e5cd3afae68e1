package dispatch_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"testing"
	"time"

	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/dispatch/container"
	"github.com/pidispatch/pidispatch/dispatch/dispatchtest"
	"github.com/pidispatch/pidispatch/jobs"
)

// How a finished run is classified, on the fakes: the record's outcome and
// reason, and what the queue was told (completed with a result, or failed
// and retried within attempts).

func TestClassifyExit(t *testing.T) {
	tests := []struct {
		name    string
		res     container.Result
		outcome string
		reason  jobs.Reason
		// the final state of a job with 2 attempts: completed after one,
		// or failed after both
		state    dispatch.JobState
		released bool // the budget reservation given back
	}{
		{"exit 0", container.Result{ExitCode: 0}, jobs.OutcomeCompleted, jobs.ReasonCompleted, dispatch.StateCompleted, false},
		{"exit 2", container.Result{ExitCode: 2}, jobs.OutcomePolicy, jobs.ReasonPolicy, dispatch.StateCompleted, false},
		{"exit 1", container.Result{ExitCode: 1}, jobs.OutcomeFailed, jobs.ReasonExit1, dispatch.StateFailed, false},
		{"exit 3", container.Result{ExitCode: 3}, jobs.OutcomeFailed, jobs.ReasonExitOther, dispatch.StateFailed, false},
		{"exit 137", container.Result{ExitCode: 137}, jobs.OutcomeFailed, jobs.ReasonExitOther, dispatch.StateFailed, false},
		{"exit 125", container.Result{ExitCode: 125}, jobs.OutcomeFailed, jobs.ReasonNeverStarted, dispatch.StateFailed, true},
		{"exit 126", container.Result{ExitCode: 126}, jobs.OutcomeFailed, jobs.ReasonNeverStarted, dispatch.StateFailed, true},
		{"exit 127", container.Result{ExitCode: 127}, jobs.OutcomeFailed, jobs.ReasonNeverStarted, dispatch.StateFailed, true},
		{"timeout", container.Result{ExitCode: 137, TimedOut: true}, jobs.OutcomePolicy, jobs.ReasonTimeout, dispatch.StateCompleted, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newFakeHost(t)
			h.rt.Script("cls", tc.res, nil)
			h.start(t)
			h.add(t, "cls", forgeJob, 2)
			s := h.wait(t, "cls", finished)
			attempts := 1
			if tc.state == dispatch.StateFailed {
				attempts = 2 // retried within attempts
			}
			if s.State != tc.state || s.AttemptsMade != attempts {
				t.Fatalf("queue: %+v, want %s after %d attempt(s)", s, tc.state, attempts)
			}
			recs := h.records(t, "cls")
			if len(recs) != attempts || recs[0].Outcome != tc.outcome || recs[0].Reason != tc.reason || recs[0].Attempt != 1 {
				t.Fatalf("records = %+v, want attempt 1 %s/%s", recs, tc.outcome, tc.reason)
			}
			if recs[0].ExitCode == nil || *recs[0].ExitCode != tc.res.ExitCode {
				t.Fatalf("record exit code %v, want %d", recs[0].ExitCode, tc.res.ExitCode)
			}
			if tc.state == dispatch.StateCompleted && tc.outcome == jobs.OutcomePolicy && resultReason(t, s) != tc.reason {
				t.Fatalf("result %s, want reason %s", s.Result, tc.reason)
			}
			if tc.released {
				eventually(t, "the never-started run's reservation is given back", func() bool {
					day, _ := h.budget.Counts()
					return day == 0
				})
			} else if day, _ := h.budget.Counts(); day < 1 {
				t.Fatalf("budget counts %d, want the start counted", day)
			}
		})
	}
}

// A failed attempt is retried while attempts remain: one record per attempt,
// then failed for good.
func TestClassifyRetriesWithinAttempts(t *testing.T) {
	h := newFakeHost(t)
	h.rt.Script("retry", container.Result{ExitCode: 1}, nil)
	h.start(t)
	h.add(t, "retry", forgeJob, 3)
	s := h.wait(t, "retry", finished)
	if s.State != dispatch.StateFailed || s.AttemptsMade != 3 || s.FailedReason != string(jobs.ReasonExit1) {
		t.Fatalf("queue: %+v, want failed after 3 attempts", s)
	}
	recs := h.records(t, "retry")
	if len(recs) != 3 {
		t.Fatalf("%d records, want one per attempt", len(recs))
	}
	for i, r := range recs {
		if r.Attempt != i+1 || r.Reason != jobs.ReasonExit1 {
			t.Fatalf("record %d = %+v", i, r)
		}
	}
}

// The exit line's telemetry becomes the completed job's result and the
// record's.
func TestClassifyTelemetry(t *testing.T) {
	h := newFakeHost(t)
	raw := json.RawMessage(`{"event":"exit","outcome":"completed","turns":3}`)
	h.rt.Script("tele", container.Result{ExitCode: 0, Telemetry: &container.Telemetry{Raw: raw}}, nil)
	h.start(t)
	h.add(t, "tele", forgeJob, 1)
	s := h.wait(t, "tele", finished)
	if string(s.Result) != string(raw) {
		t.Fatalf("result %s, want the telemetry %s", s.Result, raw)
	}
	rec := h.oneRecord(t, "tele", jobs.OutcomeCompleted, jobs.ReasonCompleted)
	if string(rec.Telemetry) != string(raw) {
		t.Fatalf("record telemetry %s", rec.Telemetry)
	}
}

// A run error that is not the image's: failed exit-other, retried.
func TestClassifyRunError(t *testing.T) {
	h := newFakeHost(t)
	h.rt.Script("rerr", container.Result{Container: "c", ExitCode: 0, StartedAt: time.Now(), EndedAt: time.Now()}, fmt.Errorf("wait for container: connection reset"))
	h.start(t)
	h.add(t, "rerr", forgeJob, 1)
	h.wait(t, "rerr", finished)
	h.oneRecord(t, "rerr", jobs.OutcomeFailed, jobs.ReasonExitOther)
}

// runningJob boots h with every run blocking until stopped, adds job id and
// waits until its container runs.
func runningJob(t *testing.T, h *fakeHost, id string, attempts int) {
	t.Helper()
	h.rt.RunFunc = dispatchtest.BlockUntilStopped
	h.start(t)
	h.add(t, id, forgeJob, attempts)
	eventually(t, "the container runs", func() bool { return len(h.rt.Specs()) == 1 })
}

// The lock lost while the container runs (the stalled check took the job):
// the run is stopped, recorded stalled, and nothing is reported.
func TestLockLossStopsTheRun(t *testing.T) {
	h := newFakeHost(t)
	h.tune.LockTTL = 300 * time.Millisecond
	runningJob(t, h, "lost", 3)
	h.queue.ExpireLock("lost")
	eventually(t, "the run is recorded", func() bool { return len(h.records(t, "lost")) == 1 })
	h.oneRecord(t, "lost", jobs.OutcomeFailed, jobs.ReasonStalled)
	s, _ := h.queue.Snapshot("lost")
	if s.State != dispatch.StateActive || s.AttemptsMade != 0 {
		t.Fatalf("queue: %+v, want left to the stalled check (active, no report)", s)
	}
	st, err := h.queue.CheckStalled(context.Background())
	if err != nil || len(st.Failed) != 1 {
		t.Fatalf("stalled check: %+v %v", st, err)
	}
}

// An operator's cancel stops the run: recorded operator-cancel, completed,
// never retried.
func TestOperatorCancel(t *testing.T) {
	h := newFakeHost(t)
	runningJob(t, h, "cancel-me", 3)
	eventually(t, "the run is watched", func() bool { return h.cancels.Watching("cancel-me") })
	h.cancels.Cancel("cancel-me")
	s := h.wait(t, "cancel-me", finished)
	if s.State != dispatch.StateCompleted || resultReason(t, s) != jobs.ReasonOperatorCancel {
		t.Fatalf("queue: %+v (%s)", s, s.Result)
	}
	h.oneRecord(t, "cancel-me", jobs.OutcomePolicy, jobs.ReasonOperatorCancel)
	if h.cancels.Watching("cancel-me") {
		t.Fatal("still watched after the run")
	}
}

// Shutdown: a run still going when the grace passes is stopped, recorded
// worker-shutdown and failed to be retried; Run returns nil.
func TestShutdownStopsRunsAfterGrace(t *testing.T) {
	h := newFakeHost(t)
	h.tune.ShutdownGrace = 200 * time.Millisecond
	runningJob(t, h, "late", 3)
	start := time.Now()
	if err := h.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("shutdown took %s", d)
	}
	s, _ := h.queue.Snapshot("late")
	if s.State != dispatchtest.StateWaiting || s.AttemptsMade != 1 || s.FailedReason != string(jobs.ReasonWorkerShutdown) {
		t.Fatalf("queue: %+v, want failed worker-shutdown and waiting for a retry", s)
	}
	h.oneRecord(t, "late", jobs.OutcomeFailed, jobs.ReasonWorkerShutdown)
}

// A stop is not the job's failure: a job cut off on its last attempt is
// recorded worker-shutdown and still runs again, with as many attempts
// left as before.
func TestShutdownDoesNotUseAnAttempt(t *testing.T) {
	h := newFakeHost(t)
	h.tune.ShutdownGrace = 100 * time.Millisecond
	runningJob(t, h, "last", 1)
	if err := h.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	s, _ := h.queue.Snapshot("last")
	if s.State != dispatchtest.StateWaiting || s.FailedReason != string(jobs.ReasonWorkerShutdown) {
		t.Fatalf("queue: %+v, want waiting for another run after worker-shutdown", s)
	}
	h.oneRecord(t, "last", jobs.OutcomeFailed, jobs.ReasonWorkerShutdown)
}

// Shutdown within the grace: the running job finishes and is recorded as it
// ended; nothing new is taken.
func TestShutdownLetsRunsFinish(t *testing.T) {
	h := newFakeHost(t)
	release := make(chan struct{})
	h.rt.RunFunc = func(ctx context.Context, spec container.Spec) (container.Result, error) {
		<-release
		return container.Result{Container: "c", StartedAt: time.Now(), EndedAt: time.Now()}, nil
	}
	h.start(t)
	h.add(t, "finish", forgeJob, 1)
	eventually(t, "the container runs", func() bool { return len(h.rt.Specs()) == 1 })
	stopped := make(chan error, 1)
	go func() { stopped <- h.stop() }()
	time.Sleep(100 * time.Millisecond)
	h.add(t, "after", forgeJob, 1)
	close(release)
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	h.oneRecord(t, "finish", jobs.OutcomeCompleted, jobs.ReasonCompleted)
	if s, _ := h.queue.Snapshot("after"); s.Takes != 0 {
		t.Fatalf("a job was taken during shutdown: %+v", s)
	}
}

// PI_LOG_RETENTION_DAYS prunes the local records, not only the mirror: at
// boot a record that ended past the retention (by the Worker's clock) is
// removed, a recent one kept.
func TestLocalRecordsArePrunedToTheRetention(t *testing.T) {
	h := newFakeHost(t)
	h.cfg.LogRetentionDays = 7
	now := time.Now().Add(36 * time.Hour) // the Worker's clock, not the wall's
	h.tune.Now = func() time.Time { return now }
	rec := func(id string, ended time.Time) string {
		p, err := jobs.WriteRecord(h.cfg.LogsDir, jobs.Record{
			JobID: id, Kind: jobs.KindManual, Target: "-", Host: "h", Image: "img", Attempt: 1,
			StartedAt: ended.Add(-time.Minute), EndedAt: ended, Outcome: jobs.OutcomeCompleted, Reason: jobs.ReasonCompleted,
		})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	old := rec("old-run", now.AddDate(0, 0, -8))
	recent := rec("recent-run", now.AddDate(0, 0, -6))
	h.start(t)
	eventually(t, "the old record pruned", func() bool {
		_, err := os.Stat(old)
		return errors.Is(err, fs.ErrNotExist)
	})
	if _, err := os.Stat(recent); err != nil {
		t.Fatalf("a record within the retention was removed: %v", err)
	}
}
