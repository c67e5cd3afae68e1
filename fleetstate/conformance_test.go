package fleetstate

import (
	"context"
	"testing"
	"time"

	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/dispatchtest"
	"github.com/pidispatch/pidispatch/internal/livetest"
	"github.com/pidispatch/pidispatch/jobs"
)

// The conformance suite of package dispatchtest, run against the Valkey
// stores, so the fakes the Worker's tests use behave as these do.

func TestConformanceBudgeter(t *testing.T) {
	dispatchtest.TestBudgeter(t, func(t *testing.T, c dispatchtest.BudgetCaps) dispatchtest.BudgetHarness {
		db := livetest.Valkey(t)
		b := NewBudget(db.Client, BudgetConfig{DailyCap: c.Daily, WeeklyCap: c.Weekly, MonthlyCap: c.Monthly, SoftHoldPct: c.SoftHoldPct})
		counts := func() budgetCounts {
			got, err := b.counts(context.Background(), "")
			if err != nil {
				t.Fatal(err)
			}
			return got
		}
		return dispatchtest.BudgetHarness{
			Budget: b,
			Counts: func() (int, int) { c := counts(); return c.day, c.week },
			Month:  func() int { return counts().month },
		}
	})
}

func TestConformanceRunMirror(t *testing.T) {
	dispatchtest.TestRunMirror(t, func(t *testing.T) dispatchtest.MirrorHarness {
		db := livetest.Valkey(t)
		m := NewMirror(db.Client, MirrorConfig{Host: "host-a"})
		return dispatchtest.MirrorHarness{Mirror: m, Read: func() []jobs.Record {
			runs, _, err := m.Read(context.Background(), 100, time.Now().Add(-time.Hour))
			if err != nil {
				t.Fatal(err)
			}
			return runs
		}}
	})
}

func TestConformanceHoldStore(t *testing.T) {
	dispatchtest.TestHoldStore(t, func(t *testing.T) dispatch.HoldStore {
		db := livetest.Valkey(t)
		return NewHolds(db.Client, HoldsConfig{})
	})
}

func TestConformanceRateLimits(t *testing.T) {
	t.Parallel()
	dispatchtest.TestRateLimits(t, func(t *testing.T) dispatchtest.RateLimitsHarness {
		db := livetest.Valkey(t)
		return dispatchtest.RateLimitsHarness{Limits: NewRateLimits(db.Client, RateLimitsConfig{}), Wait: time.Sleep}
	})
}
