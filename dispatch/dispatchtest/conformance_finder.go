package dispatchtest

import (
	"errors"
	"testing"

	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/fleet"
)

// FinderHarness is one Finder under test over a fleet of queues, with each
// queue's harness by name.
type FinderHarness struct {
	Finder dispatch.Finder
	Queue  func(name string) QueueHarness
}

// TestFinder runs the Finder contract and dispatch.JobLive over it: a job is
// found on whichever queue holds it, a host queue included, and is live
// until it finishes.
func TestFinder(t *testing.T, newFinder func(t *testing.T) FinderHarness) {
	h := newFinder(t)
	ctx := qctx(t)
	host := h.Queue(fleet.HostQueueName("h2"))
	h.Queue(fleet.SharedQueue).Add("other-1", []byte(`{}`), 1)
	host.Add("held-1", []byte(`{}`), 1)
	name, j, err := h.Finder.Find(ctx, "held-1")
	if err != nil || name != "pi-jobs@h2" || j == nil || j.ID != "held-1" {
		t.Fatalf("Find = %q, %+v, %v; want held-1 on pi-jobs@h2", name, j, err)
	}
	live, name, err := dispatch.JobLive(ctx, h.Finder, "held-1")
	if err != nil || !live || name != "pi-jobs@h2" {
		t.Fatalf("JobLive of a waiting job on a host queue = %v %q %v, want live on pi-jobs@h2", live, name, err)
	}
	mustTake(t, host, "tok", "held-1")
	if live, _, err := dispatch.JobLive(ctx, h.Finder, "held-1"); !live || err != nil {
		t.Fatalf("JobLive of an active job = %v, %v; want live", live, err)
	}
	if err := host.Queue.Complete(ctx, "held-1", "tok", nil); err != nil {
		t.Fatal(err)
	}
	if live, _, err := dispatch.JobLive(ctx, h.Finder, "held-1"); live || err != nil {
		t.Fatalf("JobLive of a completed job = %v, %v; want not live", live, err)
	}
	if _, _, err := h.Finder.Find(ctx, "never"); !errors.Is(err, dispatch.ErrJobNotFound) {
		t.Fatalf("Find of a missing job: %v, want ErrJobNotFound", err)
	}
	if live, _, err := dispatch.JobLive(ctx, h.Finder, "never"); live || err != nil {
		t.Fatalf("JobLive of a missing job = %v, %v; want not live, no error", live, err)
	}
}
