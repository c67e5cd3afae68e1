package dispatchtest

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/pidispatch/pidispatch/dispatch"
)

// CancelsHarness is one JobCancels under test. Request asks for jobID to be
// stopped the way an operator does (pi-dispatch cancel) and returns once
// the request was taken by a watcher or withdrawn unanswered.
type CancelsHarness struct {
	Cancels dispatch.JobCancels
	Request func(jobID string)
}

// TestJobCancels runs the JobCancels contract: a request stops the watched
// job it names, and only that one, and a watch that was stopped no longer
// stops the job.
func TestJobCancels(t *testing.T, newCancels func(t *testing.T) CancelsHarness) {
	for _, c := range []struct {
		name string
		run  func(*testing.T, CancelsHarness)
	}{
		{"RequestStopsTheWatchedJob", cancelsWatched},
		{"StoppedWatchIsNotCancelled", cancelsStopped},
	} {
		t.Run(c.name, func(t *testing.T) { c.run(t, newCancels(t)) })
	}
}

// watch watches jobID and counts the calls of its cancel.
func watch(t *testing.T, c dispatch.JobCancels, jobID string) (*atomic.Int32, func()) {
	var calls atomic.Int32
	stop := c.Watch(qctx(t), jobID, func() { calls.Add(1) })
	t.Cleanup(stop)
	return &calls, stop
}

func cancelsWatched(t *testing.T, h CancelsHarness) {
	a, _ := watch(t, h.Cancels, "job-a")
	b, _ := watch(t, h.Cancels, "job-b")
	h.Request("job-a")
	deadline := time.Now().Add(5 * time.Second)
	for a.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if a.Load() != 1 || !h.Cancels.Cancelled("job-a") {
		t.Fatalf("after a request for job-a: cancel called %d times, Cancelled = %v; want once, true",
			a.Load(), h.Cancels.Cancelled("job-a"))
	}
	if b.Load() != 0 || h.Cancels.Cancelled("job-b") {
		t.Fatalf("job-b, watched but not asked for: cancel called %d times, Cancelled = %v; want 0, false",
			b.Load(), h.Cancels.Cancelled("job-b"))
	}
	if h.Cancels.Cancelled("job-never") {
		t.Fatal("Cancelled of a job never watched nor asked for = true")
	}
}

func cancelsStopped(t *testing.T, h CancelsHarness) {
	calls, stop := watch(t, h.Cancels, "job-s")
	stop()
	stop() // stop may be called more than once
	h.Request("job-s")
	if calls.Load() != 0 || h.Cancels.Cancelled("job-s") {
		t.Fatalf("request after stop: cancel called %d times, Cancelled = %v; want 0, false",
			calls.Load(), h.Cancels.Cancelled("job-s"))
	}
}
