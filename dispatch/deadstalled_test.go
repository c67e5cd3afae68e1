package dispatch

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/pidispatch/pidispatch/container"
	"github.com/pidispatch/pidispatch/enqueue"
	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/jobs"
	"github.com/pidispatch/pidispatch/queue"
	"github.com/pidispatch/pidispatch/registry"
)

// A host that hangs without dying stops beating and stops checking its own
// queue: its running job's lock expires and its registry row expires. Two
// other hosts, both tending dead hosts' queues, fail that job as stalled
// with exactly one record between them. A job on the queue of a host whose
// row is live is left to that host. Before, only a host checked its own
// queue, and the hung host's job stayed active.
func TestHungHostsQueueIsCheckedByOthers(t *testing.T) {
	ca := newOrphanFixture(t)
	ca.mirror = true
	ca.tune.RehomeInterval = 200 * time.Millisecond
	dir, err := queue.NewDirectory(ca.db.Client, queue.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ca.dir = testStores.Directory(dir)
	ca.cfg.WorkerName = "ca"
	cb := *ca
	cb.cfg.WorkerName, cb.cfg.LogsDir = "cb", t.TempDir()
	ctx := context.Background()

	hung := takeUnlocked(t, ca, "hung", "hung-1", registry.Config{TTL: 300 * time.Millisecond, Interval: 100 * time.Millisecond})
	busy := takeUnlocked(t, ca, "busy", "busy-1", registry.Config{})
	for _, f := range []*orphanFixture{ca, &cb} {
		reg, err := registry.New(f.db.Client, f.cfg.WorkerName, registry.Facts{}, registry.Config{})
		if err != nil {
			t.Fatal(err)
		}
		f.boot(t, &orphanRuntime{reap: container.ReapReport{Enumerated: true}}, testStores.Registry(reg))
	}

	deadline := time.Now().Add(15 * time.Second)
	for {
		j, err := hung.Get(ctx, "hung-1")
		if err == nil && j.State == queue.StateFailed {
			if j.FailedReason != jobs.ReasonStalled {
				t.Fatalf("hung job failed with %q, want stalled", j.FailedReason)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the hung host's job is still %+v (%v), want failed as stalled by another host", j, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(3 * ca.tune.RehomeInterval) // both hosts pass over it again
	a, _ := jobs.ReadRecords(ca.cfg.LogsDir, "hung-1")
	b, _ := jobs.ReadRecords(cb.cfg.LogsDir, "hung-1")
	recs := append(a, b...)
	if len(recs) != 1 || recs[0].Reason != jobs.ReasonStalled || recs[0].Attempt != 1 || recs[0].Host != "hung" {
		t.Fatalf("records %+v, want one stalled record of attempt 1 that ran on hung", recs)
	}
	if n, _ := ca.db.Client.Exists(ctx, testStores.RunRecordKey("hung-1", 1)).Result(); n != 1 {
		t.Fatal("the stalled record was not mirrored")
	}
	if n, _ := ca.db.Client.Exists(ctx, "host:h:busy").Result(); n != 1 {
		t.Fatal("busy's row expired: the test proves nothing about live hosts")
	}
	if j, err := busy.Get(ctx, "busy-1"); err != nil || j.State != queue.StateActive {
		t.Fatalf("a live host's job %+v (%v), want left active for its host", j, err)
	}
	if recs, _ := jobs.ReadRecords(ca.cfg.LogsDir, "busy-1"); len(recs) != 0 {
		t.Fatalf("a live host's job was recorded: %+v", recs)
	}
}

// takeUnlocked publishes host's registry row once (it then beats no more,
// and the row lives for cfg.TTL), adds job id to host's own queue, takes it
// as host's worker does, and lets its lock expire, as a hang leaves it.
func takeUnlocked(t *testing.T, f *orphanFixture, host, id string, cfg registry.Config) *queue.Queue {
	t.Helper()
	ctx := context.Background()
	reg, err := registry.New(f.db.Client, host, registry.Facts{}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.Publish(ctx); err != nil {
		t.Fatal(err)
	}
	q, err := queue.New(f.db.Client, fleet.HostQueueName(host), queue.Config{WorkerName: host, LockTTL: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	data, _ := json.Marshal(jobs.Job{Kind: jobs.KindForge, Repo: "acme/" + host, Flow: "fix", Task: "t"})
	if _, _, err := q.Add(ctx, enqueue.JobName, data, queue.AddOptions{JobID: id}); err != nil {
		t.Fatal(err)
	}
	if j, err := q.Fetch(ctx, "tok-"+id); err != nil || j == nil || j.ID != id {
		t.Fatalf("fetch %s: %+v %v", id, j, err)
	}
	time.Sleep(100 * time.Millisecond)
	return q
}
