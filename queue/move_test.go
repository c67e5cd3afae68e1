package queue_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/queue"
)

func TestMoveToKeepsStateAndDedup(t *testing.T) {
	db := livetest.Valkey(t)
	ctx := context.Background()
	from, err := queue.New(db.Client, fleet.HostQueueName("gone"), queue.Config{})
	if err != nil {
		t.Fatal(err)
	}
	to, err := queue.New(db.Client, fleet.HostQueueName("live"), queue.Config{})
	if err != nil {
		t.Fatal(err)
	}
	data := json.RawMessage(`{"kind":"forge"}`)
	if _, _, err := from.Add(ctx, "j", data, queue.AddOptions{JobID: "ready-1", Attempts: 2, Dedup: &queue.Dedup{ID: "d1", TTL: time.Minute}}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := from.Add(ctx, "j", data, queue.AddOptions{JobID: "later-1", Delay: time.Hour}); err != nil {
		t.Fatal(err)
	}
	ids, err := from.PendingIDs(ctx, 10)
	if err != nil || len(ids) != 2 || ids[0] != "ready-1" || ids[1] != "later-1" {
		t.Fatalf("pending %v %v", ids, err)
	}
	for _, id := range ids {
		if err := from.MoveTo(ctx, id, to); err != nil {
			t.Fatal(err)
		}
	}
	got, err := to.Get(ctx, "ready-1")
	if err != nil || got.State != queue.StateWaiting || got.Attempts != 2 || string(got.Data) != string(data) {
		t.Fatalf("moved ready job %+v %v", got, err)
	}
	later, err := to.Get(ctx, "later-1")
	if err != nil || later.State != queue.StateDelayed {
		t.Fatalf("moved delayed job %+v %v", later, err)
	}
	if _, err := from.Get(ctx, "ready-1"); !errors.Is(err, queue.ErrNotFound) {
		t.Fatalf("source still has the job: %v", err)
	}
	if c, _ := from.Counts(ctx); c.Waiting+c.Delayed != 0 {
		t.Fatalf("source counts %+v", c)
	}
	// The dedup id followed the job: a second delivery is still a duplicate.
	id, added, err := to.Add(ctx, "j", data, queue.AddOptions{JobID: "ready-2", Dedup: &queue.Dedup{ID: "d1", TTL: time.Minute}})
	if err != nil || added || id != "ready-1" {
		t.Fatalf("dedup after move: id=%s added=%v err=%v", id, added, err)
	}
	// The moved job runs on the target.
	job, err := to.Fetch(ctx, "tok")
	if err != nil || job == nil || job.ID != "ready-1" {
		t.Fatalf("fetch moved job: %+v %v", job, err)
	}
}

func TestMoveToRefusals(t *testing.T) {
	db := livetest.Valkey(t)
	ctx := context.Background()
	from, _ := queue.New(db.Client, fleet.HostQueueName("a"), queue.Config{})
	to, _ := queue.New(db.Client, fleet.HostQueueName("b"), queue.Config{})
	data := json.RawMessage(`{}`)
	for _, id := range []string{"held", "dup", "done"} {
		if _, _, err := from.Add(ctx, "j", data, queue.AddOptions{JobID: id}); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := to.Add(ctx, "j", data, queue.AddOptions{JobID: "dup"}); err != nil {
		t.Fatal(err)
	}
	if err := from.MoveTo(ctx, "dup", to); !errors.Is(err, queue.ErrTargetHasJob) {
		t.Fatalf("dup: %v", err)
	}
	held, err := from.Fetch(ctx, "tok")
	if err != nil || held == nil {
		t.Fatal(err)
	}
	if err := from.MoveTo(ctx, held.ID, to); !errors.Is(err, queue.ErrJobLocked) {
		t.Fatalf("held: %v", err)
	}
	if err := from.Complete(ctx, held.ID, "tok", nil); err != nil {
		t.Fatal(err)
	}
	if err := from.MoveTo(ctx, held.ID, to); !errors.Is(err, queue.ErrNotPending) {
		t.Fatalf("finished: %v", err)
	}
	if err := from.MoveTo(ctx, "nope", to); !errors.Is(err, queue.ErrNotFound) {
		t.Fatalf("missing: %v", err)
	}
	if err := from.MoveTo(ctx, "dup", from); !errors.Is(err, queue.ErrInvalidOption) {
		t.Fatalf("same queue: %v", err)
	}
	// Into a paused target, a ready job waits (BullMQ 6's layout, the
	// default) and nobody takes it.
	if err := to.Pause(ctx); err != nil {
		t.Fatal(err)
	}
	rest, _ := from.PendingIDs(ctx, 10)
	for _, id := range rest {
		if id == "dup" {
			continue
		}
		if err := from.MoveTo(ctx, id, to); err != nil {
			t.Fatal(err)
		}
		j, _ := to.Get(ctx, id)
		if j.State != queue.StateWaiting {
			t.Fatalf("%s in a paused target is %s", id, j.State)
		}
		if got, err := to.Fetch(ctx, "t"); err != nil || got != nil {
			t.Fatalf("a paused target gave %v, %v", got, err)
		}
	}
}

func TestDirectoryFindAndPending(t *testing.T) {
	db := livetest.Valkey(t)
	ctx := context.Background()
	d, err := queue.NewDirectory(db.Client, queue.Config{})
	if err != nil {
		t.Fatal(err)
	}
	hq, _ := d.Queue(fleet.HostQueueName("h1"))
	if _, _, err := hq.Add(ctx, "j", json.RawMessage(`{}`), queue.AddOptions{JobID: "on-h1"}); err != nil {
		t.Fatal(err)
	}
	name, job, err := d.Find(ctx, "on-h1")
	if err != nil || name != "pi-jobs@h1" || job.ID != "on-h1" {
		t.Fatalf("find: %s %+v %v", name, job, err)
	}
	if _, _, err := d.Find(ctx, "nowhere"); !errors.Is(err, queue.ErrNotFound) {
		t.Fatalf("find missing: %v", err)
	}
	jobs, err := d.Pending(ctx, "pi-jobs@h1", 5)
	if err != nil || len(jobs) != 1 || jobs[0].ID != "on-h1" {
		t.Fatalf("pending: %v %v", jobs, err)
	}
	if err := d.Move(ctx, "pi-jobs@h1", fleet.SharedQueue, "on-h1"); err != nil {
		t.Fatal(err)
	}
	if name, _, err := d.Find(ctx, "on-h1"); err != nil || name != fleet.SharedQueue {
		t.Fatalf("after move: %s %v", name, err)
	}
}
