package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/fleetstate"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/jobs"
	"github.com/pidispatch/pidispatch/operator"
	"github.com/pidispatch/pidispatch/queue"
	"github.com/pidispatch/pidispatch/registry"
)

// `capacity` over a live fleet: two hosts of 2 and 3 slots, four jobs
// waiting on alpha's queue, two runs of alpha ended in the last hour: the
// table and the JSON give the figures, and the drain time is two hours.
func TestCapacityCommand(t *testing.T) {
	db := livetest.Valkey(t)
	env := vars(db.URL)
	ctx := context.Background()
	publish(t, db.Client, "alpha", registry.Facts{Routes: registry.Value(true), Concurrency: registry.Value(2)})
	publish(t, db.Client, "beta", registry.Facts{Routes: registry.Value(true), Concurrency: registry.Value(3)})

	r := runCLI(t, env, "capacity", "--json")
	var rep operator.CapacityReport
	if r.code != exitOK || json.Unmarshal([]byte(r.stdout), &rep) != nil {
		t.Fatalf("%+v", r)
	}
	if rep.Slots != 5 || rep.Waiting != 0 || rep.DrainMs == nil || *rep.DrainMs != 0 {
		t.Fatalf("empty fleet: %+v", rep)
	}

	q := newQueue(t, db.Client, fleet.HostQueueName("alpha"))
	for _, id := range []string{"w1", "w2", "w3", "w4"} {
		if _, _, err := q.Add(ctx, "pi", json.RawMessage(`{}`), queue.AddOptions{JobID: id}); err != nil {
			t.Fatal(err)
		}
	}
	r = runCLI(t, env, "capacity")
	if r.code != exitOK || !strings.Contains(r.stdout, "drain: no rate") {
		t.Fatalf("jobs wait and no run ended: %+v", r)
	}

	now := time.Now()
	exit := 0
	mirror := fleetstate.NewMirror(db.Client, fleetstate.MirrorConfig{})
	for i, end := range []time.Time{now.Add(-10 * time.Minute), now.Add(-20 * time.Minute)} {
		rec := jobs.Record{JobID: "done-" + string(rune('a'+i)), Kind: jobs.KindManual, Target: "/src", StartedAt: end.Add(-time.Minute),
			EndedAt: end, Outcome: jobs.OutcomeCompleted, Reason: jobs.ReasonCompleted, ExitCode: &exit, Attempt: 1,
			Host: "alpha", Image: "pi-job:test"}
		if err := mirror.Mirror(ctx, rec); err != nil {
			t.Fatal(err)
		}
	}
	r = runCLI(t, env, "capacity", "--json")
	rep = operator.CapacityReport{}
	if r.code != exitOK || json.Unmarshal([]byte(r.stdout), &rep) != nil {
		t.Fatalf("%+v", r)
	}
	if rep.Waiting != 4 || rep.Finished != 2 || rep.DrainMs == nil || *rep.DrainMs != (2*time.Hour).Milliseconds() {
		t.Fatalf("4 jobs at 2 an hour: %+v", rep)
	}
	r = runCLI(t, env, "capacity")
	for _, want := range []string{"alpha  2      0     0%     4        2.0      2h0m0s",
		"fleet: 5 slots, 0 busy (0%), 4 waiting, 0 delayed; 2 runs ended in the last 1h0m0s (2.0 an hour); drain: 2h0m0s",
		"runs read from: mirror"} {
		if !strings.Contains(r.stdout, want) {
			t.Fatalf("capacity does not print %q:\n%s", want, r.stdout)
		}
	}
	if r := runCLI(t, env, "capacity", "extra"); r.code != exitUsage {
		t.Fatalf("%+v", r)
	}
}
