package stack

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/dispatchtest"
	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/internal/livetest"
	"github.com/pidispatch/pidispatch/lease"
	"github.com/pidispatch/pidispatch/queue"
)

// The conformance suite of package dispatchtest, run against the Valkey
// implementations the stack wires, so the fakes the Worker's tests run on
// and the real parts are held to the same behaviour.

func TestConformanceJobQueue(t *testing.T) {
	dispatchtest.TestJobQueue(t, func(t *testing.T) dispatchtest.QueueHarness {
		db := livetest.Valkey(t)
		q, err := queue.New(db.Client, fleet.SharedQueue, queue.Config{})
		if err != nil {
			t.Fatal(err)
		}
		return queueHarness(t, db.Client, q)
	})
}

func TestConformanceFinder(t *testing.T) {
	dispatchtest.TestFinder(t, func(t *testing.T) dispatchtest.FinderHarness {
		db := livetest.Valkey(t)
		dir, err := queue.NewDirectory(db.Client, queue.Config{})
		if err != nil {
			t.Fatal(err)
		}
		return dispatchtest.FinderHarness{Finder: Directory(dir), Queue: func(name string) dispatchtest.QueueHarness {
			q, err := dir.Queue(name)
			if err != nil {
				t.Fatal(err)
			}
			return queueHarness(t, db.Client, q)
		}}
	})
}

// queueHarness drives q, on client, for the suite.
func queueHarness(t *testing.T, client redis.UniversalClient, q *queue.Queue) dispatchtest.QueueHarness {
	ctx := context.Background()
	return dispatchtest.QueueHarness{
		Queue: JobQueue(q),
		Add: func(id string, data []byte, attempts int) {
			if _, _, err := q.Add(ctx, "job", data, queue.AddOptions{JobID: id, Attempts: attempts}); err != nil {
				t.Fatal(err)
			}
		},
		Take: func(token string) *dispatch.HeldJob {
			j, err := q.Fetch(ctx, token)
			if err != nil {
				t.Fatal(err)
			}
			return heldJob(j)
		},
		ExpireLock: func(id string) {
			if err := client.Del(ctx, "bull:"+q.Name()+":"+id+":lock").Err(); err != nil {
				t.Fatal(err)
			}
		},
	}
}

func TestConformanceLeaser(t *testing.T) {
	dispatchtest.TestLeaser(t, func(t *testing.T) func(string) dispatch.Leaser {
		db := livetest.Valkey(t)
		return func(worker string) dispatch.Leaser { return Leaser(lease.New(db.Client, worker, lease.Config{})) }
	})
}
