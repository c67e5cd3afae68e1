package fleetstate_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/pidispatch/pidispatch/dispatch/dispatchtest"
	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/fleetstate"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/operator"
	"github.com/pidispatch/pidispatch/queue"
)

// The JobCancels suite against the watcher a worker runs, asked the way the
// operator's CLI asks: operator.Cancel of a job the worker holds.
func TestConformanceJobCancels(t *testing.T) {
	dispatchtest.TestJobCancels(t, func(t *testing.T) dispatchtest.CancelsHarness {
		db := livetest.Valkey(t)
		q, err := queue.New(db.Client, fleet.HostQueueName("alpha"), queue.Config{})
		if err != nil {
			t.Fatal(err)
		}
		w, err := fleetstate.NewCancelWatcher(db.Client, "alpha", fleetstate.CancelWatcherConfig{Poll: 50 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		ctx, stop := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- w.Run(ctx) }()
		t.Cleanup(func() {
			stop()
			if err := <-done; err != nil {
				t.Errorf("watcher Run = %v", err)
			}
		})
		return dispatchtest.CancelsHarness{Cancels: w, Request: func(jobID string) {
			// operator.Cancel stops only a job some worker holds.
			bg := context.Background()
			if _, _, err := q.Add(bg, "job", json.RawMessage(`{}`), queue.AddOptions{JobID: jobID}); err != nil {
				t.Fatal(err)
			}
			if j, err := q.Fetch(bg, queue.NewToken()); err != nil || j == nil || j.ID != jobID {
				t.Fatalf("fetch %s: %+v %v", jobID, j, err)
			}
			if _, err := operator.Cancel(bg, db.Client, jobID, time.Second); err != nil {
				t.Fatal(err)
			}
		}}
	})
}
