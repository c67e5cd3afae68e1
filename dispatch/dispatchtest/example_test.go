package dispatchtest_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"

	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/dispatch/dispatchtest"
	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/jobs"
)

// A Worker on fakes runs one forge job to its record with no Valkey and no
// Docker: the way to unit-test a deployment's configuration and gates. The
// job is signed with the fleet key, as every producer that holds it signs:
// a worker refuses a job its key did not sign.
func Example() {
	dir, _ := os.MkdirTemp("", "dispatchtest-example")
	defer os.RemoveAll(dir)
	key, _ := fleet.NewKey([]byte("an example fleet key, 32 bytes or more"))

	q := dispatchtest.NewQueue(fleet.SharedQueue)
	data, _ := json.Marshal(jobs.Job{Kind: jobs.KindForge, Repo: "acme/api", Flow: "fix", Task: "fix the build"})
	sig, _ := key.SignJob(fleet.SharedQueue, "gh-1", data)
	q.Add(dispatchtest.Job{ID: "gh-1", Data: data, Signature: sig})

	cfg := dispatch.DefaultConfig()
	cfg.WorkerName, cfg.LogsDir, cfg.FleetKey = "laptop", dir, key
	w, err := dispatch.NewWorker(cfg, dispatch.Deps{
		Stores: dispatch.Stores{
			Queues: []dispatch.JobQueue{q},
			Source: dispatchtest.NewSource(q),
			Budget: dispatchtest.NewBudget(10, 0),
		},
		Runtime: dispatchtest.NewRuntime(), // every container exits 0
	}, dispatch.Tuning{JobsDir: dir, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	_, _ = q.WaitFor(ctx, "gh-1", dispatchtest.Snapshot.Finished)
	cancel()
	<-done

	recs, _ := jobs.ReadRecords(dir, "gh-1")
	fmt.Println(len(recs), recs[0].Outcome, recs[0].Reason)
	// Output: 1 completed completed
}
