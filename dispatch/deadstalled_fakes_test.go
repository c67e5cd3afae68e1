package dispatch_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/pidispatch/pidispatch/capabilities"
	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/dispatchtest"
	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/jobs"
)

// A host that hangs without dying stops beating and stops checking its own
// queue: its running job's lock expires and its registry row expires. Two
// other hosts, both tending dead hosts' queues, fail that job as stalled
// with exactly one record between them. A job on the queue of a host whose
// row is live is left to that host. Before, only a host checked its own
// queue, and the hung host's job stayed active.
func TestHungHostsQueueIsCheckedByOthers(t *testing.T) {
	shared := dispatchtest.NewQueue(fleet.SharedQueue)
	hung := takeUnlocked(t, "hung", "hung-1")
	busy := takeUnlocked(t, "busy", "busy-1")
	dir := dispatchtest.NewDirectory(shared, hung, busy)
	mirror := dispatchtest.NewMirror() // the fleet's: claims are shared
	var hosts []*fakeHost
	for _, name := range []string{"ca", "cb"} {
		h := newFakeHost(t)
		h.cfg.WorkerName, h.cfg.WorkerNameDeclared = name, true
		h.tune.RehomeInterval = 200 * time.Millisecond
		h.queue = shared
		h.deps.Queues = []dispatch.JobQueue{shared}
		h.deps.Source = dispatchtest.NewSource(shared)
		h.deps.Directory, h.deps.Finder = dir, dir
		h.deps.Mirror = mirror
		// hung's row expired; busy's is live.
		h.deps.Registry = dispatchtest.NewRegistry(name, capabilities.Host{Name: "busy"}, capabilities.Host{Name: otherOf(name)})
		h.start(t)
		hosts = append(hosts, h)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	s, err := hung.WaitFor(ctx, "hung-1", dispatchtest.Snapshot.Finished)
	if err != nil {
		t.Fatalf("the hung host's job is still %+v (%v), want failed as stalled by another host", s, err)
	}
	if s.State != dispatch.StateFailed || s.FailedReason != string(jobs.ReasonStalled) {
		t.Fatalf("hung job %+v, want failed as stalled", s)
	}
	time.Sleep(3 * hosts[0].tune.RehomeInterval) // both hosts pass over it again
	var recs []jobs.Record
	for _, h := range hosts {
		recs = append(recs, h.records(t, "hung-1")...)
	}
	if len(recs) != 1 || recs[0].Reason != jobs.ReasonStalled || recs[0].Attempt != 1 || recs[0].Host != "hung" {
		t.Fatalf("records %+v, want one stalled record of attempt 1 that ran on hung", recs)
	}
	mirrored := 0
	for _, r := range mirror.Records() {
		if r.JobID == "hung-1" {
			mirrored++
		}
	}
	if mirrored != 1 {
		t.Fatalf("the stalled record was mirrored %d times, want once", mirrored)
	}
	if s, _ := busy.Snapshot("busy-1"); s.State != dispatch.StateActive {
		t.Fatalf("a live host's job %+v, want left active for its host", s)
	}
	for _, h := range hosts {
		if recs := h.records(t, "busy-1"); len(recs) != 0 {
			t.Fatalf("a live host's job was recorded: %+v", recs)
		}
	}
}

func otherOf(name string) string {
	if name == "ca" {
		return "cb"
	}
	return "ca"
}

// takeUnlocked adds job id to host's own queue, takes it as host's worker
// does, and lets its lock expire, as a hang leaves it.
func takeUnlocked(t *testing.T, host, id string) *dispatchtest.Queue {
	t.Helper()
	q := dispatchtest.NewQueue(fleet.HostQueueName(host))
	q.WorkerName = host
	q.Add(dispatchtest.Job{ID: id, Data: []byte(fmt.Sprintf(`{"kind":"forge","repo":"acme/%s","flow":"fix","task":"t"}`, host))})
	if j := q.Take("tok-" + id); j == nil || j.ID != id {
		t.Fatalf("take %s: %+v", id, j)
	}
	q.ExpireLock(id)
	return q
}
