package stack

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/dispatchtest"
	"github.com/pidispatch/pidispatch/enqueue"
	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/internal/hostileid"
	"github.com/pidispatch/pidispatch/internal/livetest"
	"github.com/pidispatch/pidispatch/jobs"
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

// The enqueue entrances the stack's queues offer (a producer's Add and the
// forge router) keep the job id rule. (It would sit better in package
// enqueue, beside the router.)
// Every enqueue entrance either refuses an id with an error, writing
// nothing, or takes an id that keeps the job id rule.
func TestJobIDEntrances(t *testing.T) {
	ctx := context.Background()
	dbAdd, dbForge := livetest.Valkey(t), livetest.Valkey(t)
	q, err := queue.New(dbAdd.Client, fleet.SharedQueue, queue.Config{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := enqueue.NewProducer(dbForge.Client, enqueue.ProducerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	router := enqueue.NewRouter(p, enqueue.RouterConfig{})
	data, _ := json.Marshal(jobs.Job{Kind: jobs.KindForge, Repo: "acme/web", Flow: "fix", Task: "t"})
	for _, id := range hostileid.IDs() {
		valid := fleet.CheckJobID(id) == nil
		_, _, addErr := q.Add(ctx, enqueue.JobName, data, queue.AddOptions{JobID: id})
		_, forgeErr := router.EnqueueForge(ctx, enqueue.ForgeDelivery{JobID: id, Job: jobs.Job{Repo: "acme/web", Flow: "fix", Task: "t"}})
		for name, err := range map[string]error{"Add": addErr, "EnqueueForge": forgeErr} {
			if err == nil && !valid && id != "" { // "" asks for a numbered id
				t.Errorf("%s took %q, which breaks the job id rule", name, id)
			}
			if err != nil && valid && id != "" && queue.ValidateJobID(id) == nil {
				t.Errorf("%s refused %q: %v", name, id, err)
			}
		}
		if addErr != nil && id != "" {
			if n, _ := dbAdd.Client.Exists(ctx, "bull:pi-jobs:"+id).Result(); n != 0 {
				t.Errorf("Add refused %q but wrote its job", id)
			}
		}
	}
}
