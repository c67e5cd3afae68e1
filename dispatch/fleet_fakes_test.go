package dispatch_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/dispatch/container"
	"github.com/pidispatch/pidispatch/dispatch/dispatchtest"
	"github.com/pidispatch/pidispatch/jobs"
)

// Three hosts of one fleet hold its daily dollar window exactly: with $3 a
// day and a $1 cap per job, six jobs taken at once by three hosts of two
// slots each start exactly three containers and refuse the other three
// dollar-cap; the three spend $1 each, and the window, full to the cent,
// refuses the next job. A window held per host would start six.
func TestFleetHoldsTheDailyDollarWindowExactly(t *testing.T) {
	const usd = 1_000_000
	c := dispatchtest.MakeFleet(t, 3)
	c.Fleet.Dollars.DailyMicros = 3 * usd
	release := make(chan struct{})
	for _, h := range c.Hosts {
		h.Config.Spend.MaxCostMicros = usd
		h.Config.Spend.DailyCostMicros = 3 * usd
		h.Config.Concurrency = 2
		h.Deps.Gateway = &stubGateway{spend: jobs.Spend{Calls: 1, Micros: usd, Basis: jobs.BasisMetered}}
		h.Deps.ModelSockets = modelSockets{}
		h.Runtime.RunFunc = func(ctx context.Context, spec container.Spec) (container.Result, error) {
			select {
			case <-release:
			case <-ctx.Done():
			}
			return container.Result{}, nil
		}
	}
	shared := c.Fleet.Shared()
	var ids []string
	for i := 1; i <= 6; i++ {
		id := fmt.Sprintf("usd-%d", i)
		ids = append(ids, id)
		shared.Add(dispatchtest.Job{ID: id, Data: []byte(forgeJob), Attempts: 1})
	}
	c.Start(t)

	refused := func() (n int) {
		for _, id := range ids {
			if s, _ := shared.Snapshot(id); s.Finished() {
				n++
			}
		}
		return n
	}
	eventually(t, "three jobs refused while three run", func() bool { return refused() == 3 && c.Specs() == 3 })
	time.Sleep(300 * time.Millisecond) // nothing else starts
	if n := c.Specs(); n != 3 {
		t.Fatalf("%d containers started against a $3 window of $1 jobs, want 3", n)
	}
	if spent, reserved := c.Fleet.Dollars.Window(dispatch.WindowDay); spent != 0 || reserved != 3*usd {
		t.Fatalf("day window while the three run: spent %d reserved %d, want 0 and $3", spent, reserved)
	}
	close(release)
	completed, capped := 0, 0
	for _, id := range ids {
		s, err := shared.WaitFor(t.Context(), id, dispatchtest.Snapshot.Finished)
		if err != nil {
			t.Fatal(err)
		}
		recs := c.Records(t, id)
		if len(recs) != 1 {
			t.Fatalf("records of %s: %+v, want one across the fleet", id, recs)
		}
		switch {
		case s.State == dispatch.StateCompleted && recs[0].Reason == jobs.ReasonCompleted:
			completed++
		case resultReason(t, s) == jobs.ReasonDollarCap && recs[0].Reason == jobs.ReasonDollarCap:
			capped++
		default:
			t.Fatalf("%s: %+v, record %+v", id, s, recs[0])
		}
	}
	if completed != 3 || capped != 3 {
		t.Fatalf("%d completed and %d refused dollar-cap, want 3 and 3", completed, capped)
	}
	eventually(t, "the three spends settled", func() bool {
		spent, reserved := c.Fleet.Dollars.Window(dispatch.WindowDay)
		return spent == 3*usd && reserved == 0
	})
	shared.Add(dispatchtest.Job{ID: "usd-7", Data: []byte(forgeJob), Attempts: 1})
	s, err := shared.WaitFor(t.Context(), "usd-7", dispatchtest.Snapshot.Finished)
	if err != nil || resultReason(t, s) != jobs.ReasonDollarCap {
		t.Fatalf("usd-7 on a full window: %+v %v, want refused dollar-cap", s, err)
	}
	if n := c.Specs(); n != 3 {
		t.Fatalf("%d containers, want 3", n)
	}
}
