package stack

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/dispatch/dispatchtest"
	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/queue"
)

// A declared host drains the shared queue then its own and takes fleet
// leases; an undeclared one drains the shared queue only and takes none;
// both see one fleet: a job on the declared host's queue is found from the
// other, and the other's Source never takes it.
func TestFleetOpensEachHostsStores(t *testing.T) {
	db := livetest.Valkey(t)
	fl := newTestFleet(t, db.Client)
	a := dispatchtest.Open(t, fl, dispatch.FleetHost{Name: "alpha", Declared: true})
	b := dispatchtest.Open(t, fl, dispatch.FleetHost{Name: "beta"})
	names := func(s dispatch.Stores) (out []string) {
		for _, q := range s.Queues {
			out = append(out, q.Name())
		}
		return out
	}
	if got := names(a); !slices.Equal(got, []string{fleet.SharedQueue, fleet.HostQueueName("alpha")}) || a.Leases == nil {
		t.Fatalf("declared host: queues %v, leases %v; want the shared queue then its own, and leases", got, a.Leases)
	}
	if got := names(b); !slices.Equal(got, []string{fleet.SharedQueue}) || b.Leases != nil {
		t.Fatalf("undeclared host: queues %v, leases %v; want the shared queue only, no leases", got, b.Leases)
	}
	q, err := queue.New(db.Client, fleet.HostQueueName("alpha"), queue.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if _, _, err := q.Add(ctx, "job", []byte(`{}`), queue.AddOptions{JobID: "alpha-1"}); err != nil {
		t.Fatal(err)
	}
	if name, j, err := b.Finder.Find(ctx, "alpha-1"); err != nil || name != fleet.HostQueueName("alpha") || j == nil {
		t.Fatalf("beta finds alpha-1 on %q (%+v, %v), want on alpha's queue", name, j, err)
	}
	short, cancel := context.WithTimeout(ctx, fleetOptions.BlockTimeout*2)
	defer cancel()
	if q, j, err := b.Source.Next(short, "tok-b"); j != nil {
		t.Fatalf("beta took %+v from %v (%v), a job of alpha's queue", j, q, err)
	}
	if _, j, err := a.Source.Next(ctx, "tok-a"); err != nil || j == nil || j.ID != "alpha-1" {
		t.Fatalf("alpha's Next = %+v, %v; want alpha-1", j, err)
	}
}

func TestFleetRefusesABadHostName(t *testing.T) {
	db := livetest.Valkey(t)
	fl := newTestFleet(t, db.Client)
	_, err := fl.Open(t.Context(), dispatch.FleetHost{Name: "not a name"})
	var ne *fleet.NameError
	if !errors.As(err, &ne) {
		t.Fatalf("Open of a bad name: %v, want a fleet.NameError", err)
	}
}
