package operator_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/operator"
	"github.com/pidispatch/pidispatch/queue"
)

// Jobs waiting where no live worker takes them are said: on the shared queue
// with no worker at all, on a host's queue whose worker is gone.
func TestDoctorSaysWhenJobsWaitWithNoLiveWorker(t *testing.T) {
	db := livetest.Valkey(t)
	ctx := context.Background()
	cfg := doctorConfig(t, "doc-a")
	docker := &fakeDoctorDocker{present: true}
	shared := mustQueue(t, db.Client, fleet.SharedQueue)
	gone := mustQueue(t, db.Client, fleet.HostQueueName("gone"))
	for _, q := range []*queue.Queue{shared, shared, gone} {
		if _, _, err := q.Add(ctx, "j", json.RawMessage(`{}`), queue.AddOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := gone.Declare(ctx); err != nil {
		t.Fatal(err)
	}
	checks := operator.Doctor(ctx, cfg, operator.DoctorDeps{Valkey: db.Client, Docker: docker, TZ: "UTC"})
	got := findChecks(checks, "unserved")
	if len(got) != 2 || got[0].Status != operator.CheckWarn ||
		got[0].Detail != "2 jobs waiting on pi-jobs and no worker is live: nothing takes them" ||
		got[1].Detail != "1 job waiting on pi-jobs@gone and its worker gone is not live: nothing takes them" ||
		!strings.Contains(got[1].Fix, "PI_WORKER_NAME=gone") {
		t.Fatalf("unserved checks %+v", got)
	}
	if operator.Failed(checks) {
		t.Fatalf("a warning, never a failure: %+v", checks)
	}

	// A live worker takes the shared queue's jobs: only the gone host's are said.
	doctorPeer(t, db.Client, "doc-a", "UTC", "", 0)
	checks = operator.Doctor(ctx, cfg, operator.DoctorDeps{Valkey: db.Client, Docker: docker, TZ: "UTC"})
	if got := findChecks(checks, "unserved"); len(got) != 1 || !strings.Contains(got[0].Detail, "pi-jobs@gone") {
		t.Fatalf("with a live worker: %+v", got)
	}
}

// A paused fleet is said, and so is a partly paused one; run's PauseHold
// names what holds a job it queued.
func TestDoctorSaysWhenTheFleetIsPaused(t *testing.T) {
	db := livetest.Valkey(t)
	ctx := context.Background()
	cfg := doctorConfig(t, "doc-a")
	docker := &fakeDoctorDocker{present: true}
	doctorPeer(t, db.Client, "doc-a", "UTC", "", 0)
	host := mustQueue(t, db.Client, fleet.HostQueueName("doc-a"))
	if err := host.Declare(ctx); err != nil {
		t.Fatal(err)
	}
	if hold, err := operator.PauseHold(ctx, db.Client, fleet.SharedQueue); err != nil || hold != "" {
		t.Fatalf("running: hold %q, %v", hold, err)
	}
	if err := host.Pause(ctx); err != nil {
		t.Fatal(err)
	}
	checks := operator.Doctor(ctx, cfg, operator.DoctorDeps{Valkey: db.Client, Docker: docker, TZ: "UTC"})
	if c := oneCheck(t, checks, "paused"); c.Status != operator.CheckWarn || c.Detail != "fleet partly paused: pi-jobs@doc-a paused, 1 of 2 queues" {
		t.Fatalf("%+v", c)
	}
	if hold, err := operator.PauseHold(ctx, db.Client, fleet.HostQueueName("doc-a")); err != nil || hold != "its queue pi-jobs@doc-a is paused" {
		t.Fatalf("queue paused: hold %q, %v", hold, err)
	}

	set, err := operator.FleetQueues(ctx, db.Client)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := operator.Pause(ctx, db.Client, set); err != nil {
		t.Fatal(err)
	}
	checks = operator.Doctor(ctx, cfg, operator.DoctorDeps{Valkey: db.Client, Docker: docker, TZ: "UTC", Timeout: 5 * time.Second})
	if c := oneCheck(t, checks, "paused"); c.Detail != "fleet paused (2 queues): no job starts until a resume; new jobs still enqueue" || !strings.Contains(c.Fix, "pi-dispatch resume") {
		t.Fatalf("%+v", c)
	}
	if hold, err := operator.PauseHold(ctx, db.Client, fleet.SharedQueue); err != nil || hold != "the fleet is paused" {
		t.Fatalf("fleet paused: hold %q, %v", hold, err)
	}
}
