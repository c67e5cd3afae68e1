package dispatch_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/dispatch/dispatchtest"
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
	c := dispatchtest.MakeFleet(t, 2)
	hung := takeUnlocked(t, c.Fleet, "hung", "hung-1")
	busy := takeUnlocked(t, c.Fleet, "busy", "busy-1")
	// busy's row is live; hung's expired (it beats no more).
	busyRow := dispatchtest.Open(t, c.Fleet, dispatch.FleetHost{Name: "busy", Declared: true}).Registry
	if err := busyRow.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = busyRow.Close(context.Background()) })
	for _, h := range c.Hosts {
		h.Tuning.RehomeInterval = 200 * time.Millisecond
	}
	c.Start(t)

	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	s, err := hung.WaitFor(ctx, "hung-1", dispatchtest.Snapshot.Finished)
	if err != nil {
		t.Fatalf("the hung host's job is still %+v (%v), want failed as stalled by another host", s, err)
	}
	if s.State != dispatch.StateFailed || s.FailedReason != string(jobs.ReasonStalled) {
		t.Fatalf("hung job %+v, want failed as stalled", s)
	}
	time.Sleep(3 * c.Hosts[0].Tuning.RehomeInterval) // both hosts pass over it again
	if recs := c.Records(t, "hung-1"); len(recs) != 1 || recs[0].Reason != jobs.ReasonStalled || recs[0].Attempt != 1 || recs[0].Host != "hung" {
		t.Fatalf("records %+v, want one stalled record of attempt 1 that ran on hung", recs)
	}
	mirrored := 0
	for _, r := range c.Fleet.Mirror.Records() {
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
	if recs := c.Records(t, "busy-1"); len(recs) != 0 {
		t.Fatalf("a live host's job was recorded: %+v", recs)
	}
}

// takeUnlocked adds job id to host's own queue on f, takes it as host's
// worker does, and lets its lock expire, as a hang leaves it.
func takeUnlocked(t *testing.T, f *dispatchtest.Fleet, host, id string) *dispatchtest.Queue {
	t.Helper()
	q := f.Queue(fleet.HostQueueName(host))
	q.Add(dispatchtest.Job{ID: id, Data: []byte(fmt.Sprintf(`{"kind":"forge","repo":"acme/%s","flow":"fix","task":"t"}`, host))})
	if j := q.TakeAs("tok-"+id, host); j == nil || j.ID != id {
		t.Fatalf("take %s: %+v", id, j)
	}
	q.ExpireLock(id)
	return q
}
