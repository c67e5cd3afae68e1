package dispatchtest_test

import (
	"testing"

	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/dispatch/dispatchtest"
	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/jobs"
)

// Two hosts of MakeFleet are one fleet: a job on host-2's own queue runs on
// host-2 only, a job on the shared queue runs once, and both records are
// mirrored to the fleet's one mirror.
func TestMakeFleetIsOneFleet(t *testing.T) {
	c := dispatchtest.MakeFleet(t, 2)
	own := c.Fleet.Queue(fleet.HostQueueName("host-2"))
	const job = `{"kind":"forge","repo":"acme/widgets","flow":"fix","task":"t"}`
	own.Add(dispatchtest.Job{ID: "own-1", Data: []byte(job), Attempts: 1})
	c.Fleet.Shared().Add(dispatchtest.Job{ID: "shared-1", Data: []byte(job), Attempts: 1})
	c.Start(t)
	for id, q := range map[string]*dispatchtest.Queue{"own-1": own, "shared-1": c.Fleet.Shared()} {
		s, err := q.WaitFor(t.Context(), id, dispatchtest.Snapshot.Finished)
		if err != nil || s.State != dispatch.StateCompleted {
			t.Fatalf("%s: %+v, %v; want completed", id, s, err)
		}
		recs := c.Records(t, id)
		if len(recs) != 1 || recs[0].Reason != jobs.ReasonCompleted {
			t.Fatalf("records of %s: %+v, want one completed", id, recs)
		}
		if id == "own-1" && recs[0].Host != "host-2" {
			t.Fatalf("own-1 ran on %s, want host-2", recs[0].Host)
		}
	}
	if n := len(c.Hosts[0].Runtime.Specs()) + len(c.Hosts[1].Runtime.Specs()); n != 2 {
		t.Fatalf("%d containers, want 2", n)
	}
	for _, h := range c.Hosts {
		if err := h.Stop(); err != nil {
			t.Fatalf("stop %s: %v", h.Name, err)
		}
	}
	if n := len(c.Fleet.Mirror.Records()); n != 2 {
		t.Fatalf("%d records mirrored, want 2", n)
	}
}
