package stack

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/dispatch/dispatchtest"
	"github.com/pidispatch/pidispatch/fleetstate"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/jobs"
	"github.com/pidispatch/pidispatch/queue"
)

// Every store's suite of package dispatchtest against the Valkey driver the
// stack boots workers on, so the fake fleet the Worker's tests run on and
// the real one are held to the same behaviour.
func TestConformanceFleet(t *testing.T) { dispatchtest.Exercise(t, valkeyTestFleet) }

// fleetOptions keep the suites quick: short source waits and cancel polls,
// and room for the dollar suite's bursts on a loaded machine.
var fleetOptions = FleetOptions{BlockTimeout: 200 * time.Millisecond, CancelPoll: 50 * time.Millisecond, CallTimeout: 10 * time.Second}

// valkeyTestFleet is a Fleet on a database of its own, with the suites'
// hooks done as a peer client, the operator and the dashboard do them.
func valkeyTestFleet(t *testing.T) dispatchtest.TestFleet {
	db := livetest.Valkey(t)
	ctx := context.Background()
	fl := newTestFleet(t, db.Client)
	q := func(name string) *queue.Queue {
		q, err := queue.New(db.Client, name, queue.Config{})
		if err != nil {
			t.Fatal(err)
		}
		return q
	}
	starts := fleetstate.NewBudget(db.Client, fleetstate.BudgetConfig{DailyCap: 1, WeeklyCap: 1, MonthlyCap: 1})
	dollars := fleetstate.NewDollars(db.Client, fleetstate.DollarsConfig{DailyMicros: 1})
	mirror := fleetstate.NewMirror(db.Client, fleetstate.MirrorConfig{})
	return dispatchtest.TestFleet{
		Fleet: fl,
		Peer: func() dispatch.Fleet {
			opts, err := redis.ParseURL(db.URL)
			if err != nil {
				t.Fatal(err)
			}
			client := redis.NewClient(opts)
			t.Cleanup(func() { _ = client.Close() })
			return newTestFleet(t, client)
		}(),
		Add: func(name, id string, data []byte, attempts int) {
			if _, _, err := q(name).Add(ctx, "job", data, queue.AddOptions{JobID: id, Attempts: attempts}); err != nil {
				t.Fatal(err)
			}
		},
		Take: func(name, token string) *dispatch.HeldJob {
			j, err := q(name).Fetch(ctx, token)
			if err != nil {
				t.Fatal(err)
			}
			return heldJob(j)
		},
		ExpireLock: func(name, id string) {
			if err := db.Client.Del(ctx, "bull:"+name+":"+id+":lock").Err(); err != nil {
				t.Fatal(err)
			}
		},
		Starts: func() (day, week, month int) {
			ws, err := starts.Windows(ctx)
			if err != nil || len(ws) != 3 {
				t.Fatalf("start windows = %+v, %v", ws, err)
			}
			return ws[0].Count, ws[1].Count, ws[2].Count
		},
		DollarDay: func() (int64, int64) {
			// Called from the suite's sampler goroutine too: Errorf, not Fatal.
			ws, err := dollars.Windows(ctx)
			if err != nil || len(ws) == 0 || ws[0].Name != dispatch.WindowDay {
				t.Errorf("dollar windows = %+v, %v", ws, err)
				return 0, 0
			}
			return ws[0].SpentMicros, ws[0].ReservedMicros
		},
		Records: func() []jobs.Record {
			runs, _, err := mirror.Read(ctx, 100, time.Now().Add(-time.Hour))
			if err != nil {
				t.Fatal(err)
			}
			return runs
		},
		RequestCancel: func(jobID string) {
			// What pi-dispatch cancel writes for a running job.
			if err := db.Client.Set(ctx, fleetstate.CancelRequestKey(jobID), jobs.ReasonOperatorCancel, time.Minute).Err(); err != nil {
				t.Fatal(err)
			}
		},
		Wait: time.Sleep,
	}
}

// newTestFleet is a Fleet on client, closed when the test ends.
func newTestFleet(t *testing.T, client redis.UniversalClient) *Fleet {
	fl := NewFleet(client, fleetOptions)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := fl.Close(ctx); err != nil {
			t.Errorf("close the fleet's stores: %v", err)
		}
	})
	return fl
}
