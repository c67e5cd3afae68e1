package enqueue_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/pidispatch/pidispatch/enqueue"
	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/internal/testkit/hostileid"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/jobs"
	"github.com/pidispatch/pidispatch/queue"
)

// Every enqueue entrance either refuses an id with an error, writing
// nothing, or takes an id that keeps the job id rule.
func TestJobIDEntrances(t *testing.T) {
	ctx := context.Background()
	dbAdd, dbForge := livetest.Valkey(t), livetest.Valkey(t)
	q, err := queue.New(dbAdd.Client, fleet.SharedQueue, queue.Config{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := enqueue.NewProducer(dbForge.Client, enqueue.ProducerConfig{UnsignedQueues: []string{fleet.EveryQueue}})
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
