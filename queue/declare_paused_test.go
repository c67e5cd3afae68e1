package queue_test

import (
	"context"
	"testing"

	"github.com/pidispatch/pidispatch/internal/livetest"
	"github.com/pidispatch/pidispatch/queue"
)

const testFlag = "pi:paused"

// A queue declared while the flag is set starts paused; without it, running.
func TestDeclarePausedIf(t *testing.T) {
	db := livetest.Valkey(t)
	ctx := context.Background()
	q1, _ := queue.New(db.Client, queue.HostQueueName("new1"), queue.Config{})
	paused, err := q1.DeclarePausedIf(ctx, testFlag)
	if err != nil || paused {
		t.Fatalf("without the flag: paused=%v err=%v", paused, err)
	}
	if p, _ := q1.IsPaused(ctx); p {
		t.Fatal("queue paused without the flag")
	}
	if err := db.Client.Set(ctx, testFlag, "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	q2, _ := queue.New(db.Client, queue.HostQueueName("new2"), queue.Config{})
	paused, err = q2.DeclarePausedIf(ctx, testFlag)
	if err != nil || !paused {
		t.Fatalf("with the flag: paused=%v err=%v", paused, err)
	}
	if p, _ := q2.IsPaused(ctx); !p {
		t.Fatal("queue not paused although the flag is set")
	}
	names, err := queue.Discover(ctx, db.Client, "")
	if err != nil || len(names) != 2 {
		t.Fatalf("declared queues not discoverable: %v %v", names, err)
	}
}

// One transaction sets the flag and pauses every queue; a queue whose meta
// key is junk fails alone and is reported, the others change.
func TestSetPausedWithFlag(t *testing.T) {
	db := livetest.Valkey(t)
	ctx := context.Background()
	a, _ := queue.New(db.Client, queue.HostQueueName("a"), queue.Config{})
	b, _ := queue.New(db.Client, queue.HostQueueName("b"), queue.Config{})
	c, _ := queue.New(db.Client, queue.HostQueueName("c"), queue.Config{})
	if err := db.Client.Set(ctx, "bull:pi-jobs@b:meta", "junk", 0).Err(); err != nil {
		t.Fatal(err)
	}
	out, err := queue.SetPausedWithFlag(ctx, true, testFlag, a, b, c)
	if err != nil {
		t.Fatal(err)
	}
	if out.Flag != nil || out.Queues[0] != nil || out.Queues[1] == nil || out.Queues[2] != nil {
		t.Fatalf("outcome %+v", out)
	}
	for _, q := range []*queue.Queue{a, c} {
		if p, _ := q.IsPaused(ctx); !p {
			t.Fatalf("%s not paused", q.Name())
		}
	}
	if n, _ := db.Client.Exists(ctx, testFlag).Result(); n != 1 {
		t.Fatal("flag not set")
	}
	out, err = queue.SetPausedWithFlag(ctx, false, testFlag, a, c)
	if err != nil || out.Flag != nil || out.Queues[0] != nil || out.Queues[1] != nil {
		t.Fatalf("resume %+v %v", out, err)
	}
	if n, _ := db.Client.Exists(ctx, testFlag).Result(); n != 0 {
		t.Fatal("flag not cleared")
	}
	if p, _ := a.IsPaused(ctx); p {
		t.Fatal("a still paused")
	}
}
