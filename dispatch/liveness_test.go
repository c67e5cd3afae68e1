package dispatch_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/internal/livetest"
	"github.com/pidispatch/pidispatch/queue"
	"github.com/pidispatch/pidispatch/stack"
)

// A held job on a host queue is live; the same lookup on the shared queue
// alone (the original's) would have called it dead.
func TestJobLiveAcrossQueues(t *testing.T) {
	db := livetest.Valkey(t)
	ctx := context.Background()
	dir, err := queue.NewDirectory(db.Client, queue.Config{})
	if err != nil {
		t.Fatal(err)
	}
	host, _ := dir.Queue(fleet.HostQueueName("h2"))
	if _, _, err := host.Add(ctx, "j", json.RawMessage(`{}`), queue.AddOptions{JobID: "held-1"}); err != nil {
		t.Fatal(err)
	}
	live, name, err := dispatch.JobLive(ctx, stack.Directory(dir), "held-1")
	if err != nil || !live || name != "pi-jobs@h2" {
		t.Fatalf("JobLive = %v %q %v, want live on pi-jobs@h2", live, name, err)
	}
	shared, _ := dir.Queue(fleet.SharedQueue)
	if _, err := shared.Get(ctx, "held-1"); err == nil {
		t.Fatal("test setup: the job must not be on the shared queue")
	}
	job, err := host.Fetch(ctx, "tok")
	if err != nil || job == nil {
		t.Fatal(err)
	}
	if live, _, _ := dispatch.JobLive(ctx, stack.Directory(dir), "held-1"); !live {
		t.Fatal("an active job is live")
	}
	if err := host.Complete(ctx, "held-1", "tok", nil); err != nil {
		t.Fatal(err)
	}
	if live, _, err := dispatch.JobLive(ctx, stack.Directory(dir), "held-1"); live || err != nil {
		t.Fatalf("a completed job is not live: %v %v", live, err)
	}
	if live, _, err := dispatch.JobLive(ctx, stack.Directory(dir), "never"); live || err != nil {
		t.Fatalf("a missing job is not live: %v %v", live, err)
	}
}
