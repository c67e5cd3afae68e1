package cronsync

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/internal/testkit/logtest"
	"github.com/pidispatch/pidispatch/queue"
)

func TestReconcileInstallsAndPrunes(t *testing.T) {
	ctx := context.Background()
	db := livetest.Valkey(t)
	q, err := queue.New(db.Client, fleet.HostQueueName("a"), queue.Config{})
	if err != nil {
		t.Fatal(err)
	}
	// A scheduler from an older file, which the new set no longer names.
	if _, err := q.UpsertScheduler(ctx, "old", queue.Scheduler{Pattern: "0 0 1 1 *", JobName: JobName}); err != nil {
		t.Fatal(err)
	}
	set := mustParse(t, triggersFile(
		cronTrigger{id: "nightly", pattern: "0 3 * * *", folder: "/srv/a"},
		cronTrigger{id: "tokyo", pattern: "*/10 * * * * *", tz: "Asia/Tokyo", folder: "/srv/b"},
	))
	logs := &logtest.Buffer{}
	res, err := Reconcile(ctx, q, set, Options{Host: "a", TZ: "Europe/Amsterdam", Logger: logs.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	if res.Installed != 2 || res.Removed != 1 || !slices.Equal(res.RemovedIDs, []string{"old"}) {
		t.Fatalf("Result = %+v, want 2 installed, old removed", res)
	}
	ev := logs.Events(t, "scheduler_removed_orphan")
	if len(ev) != 1 || ev[0]["host"] != "a" || ev[0]["schedulerId"] != "old" {
		t.Fatalf("scheduler_removed_orphan events = %v", ev)
	}

	list, err := q.Schedulers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 {
		t.Fatalf("schedulers = %+v", list)
	}
	byID := map[string]queue.SchedulerInfo{}
	for _, s := range list {
		byID[s.ID] = s
	}
	n := byID["nightly"]
	if n.Pattern != "0 3 * * *" || n.TZ != "Europe/Amsterdam" || n.JobName != JobName || n.Attempts != RunAttempts ||
		n.RemoveOnComplete.Age != 24*time.Hour || n.RemoveOnFail.Age != 7*24*time.Hour {
		t.Fatalf("nightly scheduler = %+v", n)
	}
	var data map[string]any
	if err := json.Unmarshal(n.Data, &data); err != nil {
		t.Fatal(err)
	}
	if data["kind"] != "cron" || data["schedulerId"] != "nightly" || data["folder"] != "/srv/a" || data["flow"] != "fix" {
		t.Fatalf("nightly job data = %s", n.Data)
	}
	if tk := byID["tokyo"]; tk.TZ != "Asia/Tokyo" || tk.Pattern != "*/10 * * * * *" {
		t.Fatalf("a trigger's own zone was not installed: %+v", tk)
	}

	// Reconciling the same set again changes nothing and removes nothing.
	res, err = Reconcile(ctx, q, set, Options{Host: "a", TZ: "Europe/Amsterdam"})
	if err != nil || res.Installed != 2 || res.Removed != 0 {
		t.Fatalf("second reconcile = %+v, %v", res, err)
	}
	if got := schedulerIDs(t, q); !slices.Equal(got, []string{"nightly", "tokyo"}) {
		t.Fatalf("schedulers after a repeat = %v", got)
	}

	// An empty set is an opinion: no schedulers.
	res, err = Reconcile(ctx, q, []Entry{}, Options{Host: "a"})
	if err != nil || res.Removed != 2 {
		t.Fatalf("empty set = %+v, %v", res, err)
	}
	if got := schedulerIDs(t, q); len(got) != 0 {
		t.Fatalf("schedulers left after an empty set: %v", got)
	}
}

// Removing a trigger from the file removes its scheduler's runs that wait,
// including one that was taken and deferred (a pause window, a busy scope):
// a pruned trigger never runs again.
func TestPruneRemovesDeferredRun(t *testing.T) {
	ctx := context.Background()
	db := livetest.Valkey(t)
	q, err := queue.New(db.Client, fleet.HostQueueName("a"), queue.Config{})
	if err != nil {
		t.Fatal(err)
	}
	set := mustParse(t, triggersFile(cronTrigger{id: "tick", pattern: "* * * * * *", folder: "/srv/a"}))
	if _, err := Reconcile(ctx, q, set, Options{Host: "a"}); err != nil {
		t.Fatal(err)
	}
	var run *queue.Job
	for deadline := time.Now().Add(5 * time.Second); run == nil; time.Sleep(10 * time.Millisecond) {
		if run, err = q.Fetch(ctx, "tok"); err != nil || time.Now().After(deadline) {
			t.Fatalf("no run of tick to take: %v", err)
		}
	}
	if err := q.Defer(ctx, run.ID, "tok", time.Hour); err != nil {
		t.Fatal(err)
	}
	res, err := Reconcile(ctx, q, []Entry{}, Options{Host: "a"})
	if err != nil || res.Removed != 1 {
		t.Fatalf("prune = %+v, %v", res, err)
	}
	if _, err := q.Get(ctx, run.ID); err == nil {
		t.Fatalf("the deferred run %s of a pruned trigger is still queued", run.ID)
	}
	if c, err := q.Counts(ctx); err != nil || c != (queue.Counts{}) {
		t.Fatalf("counts after the prune = %+v, %v", c, err)
	}
}

// A per-trigger zone makes the scheduler's next run the zone's wall time, and
// an entry without one runs in the host's zone.
func TestPerTriggerZoneNextRun(t *testing.T) {
	ctx := context.Background()
	db := livetest.Valkey(t)
	q, err := queue.New(db.Client, fleet.HostQueueName("a"), queue.Config{})
	if err != nil {
		t.Fatal(err)
	}
	set := mustParse(t, triggersFile(
		cronTrigger{id: "tokyo-930", pattern: "30 9 * * *", tz: "Asia/Tokyo", folder: "/srv/a"},
		cronTrigger{id: "host-0300", pattern: "0 3 * * *", folder: "/srv/a"},
	))
	before := time.Now()
	if _, err := Reconcile(ctx, q, set, Options{Host: "a", TZ: "America/New_York"}); err != nil {
		t.Fatal(err)
	}
	list, err := q.Schedulers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	next := map[string]queue.SchedulerInfo{}
	for _, s := range list {
		next[s.ID] = s
	}
	tokyo, _ := time.LoadLocation("Asia/Tokyo")
	ny, _ := time.LoadLocation("America/New_York")
	check := func(id string, loc *time.Location, hour, minute int) {
		t.Helper()
		want := nextDaily(before, loc, hour, minute)
		got := next[id]
		if got.TZ != loc.String() || !got.Next.Equal(want) {
			t.Errorf("%s: next %s (tz %q), want %s (%s)", id, got.Next.UTC(), got.TZ, want.UTC(), loc)
		}
	}
	check("tokyo-930", tokyo, 9, 30)
	check("host-0300", ny, 3, 0)
}

// nextDaily is the first hh:mm wall time in loc strictly after t.
func nextDaily(t time.Time, loc *time.Location, hour, minute int) time.Time {
	local := t.In(loc)
	for d := 0; d <= 2; d++ {
		c := time.Date(local.Year(), local.Month(), local.Day()+d, hour, minute, 0, 0, loc)
		if c.After(t) {
			return c
		}
	}
	panic("unreachable")
}
