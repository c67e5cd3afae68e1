package fleetstate

import (
	"context"
	"testing"
	"time"

	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/dispatch/dispatchtest"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/jobs"
	"github.com/redis/go-redis/v9"
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

func TestConformanceDollarBudget(t *testing.T) {
	t.Parallel()
	dispatchtest.TestDollarBudget(t, func(t *testing.T, c dispatchtest.DollarCaps) dispatchtest.DollarHarness {
		db := livetest.Valkey(t)
		cfg := DollarsConfig{DailyMicros: c.Daily, WeeklyMicros: c.Weekly, MonthlyMicros: c.Monthly, CallTimeout: 10 * time.Second}
		d := NewDollars(db.Client, cfg)
		return dispatchtest.DollarHarness{
			Budget: d,
			Peer: func() dispatch.DollarBudget {
				opts, err := redis.ParseURL(db.URL)
				if err != nil {
					t.Fatal(err)
				}
				client := redis.NewClient(opts)
				t.Cleanup(func() { _ = client.Close() })
				return NewDollars(client, cfg)
			},
			Day: func() (int64, int64) {
				// Called from the suite's sampler goroutine too: Errorf, not Fatal.
				ws, err := d.Windows(context.Background())
				if err != nil || len(ws) == 0 || ws[0].Name != dispatch.WindowDay {
					t.Errorf("dollar windows = %+v, %v", ws, err)
					return 0, 0
				}
				return ws[0].SpentMicros, ws[0].ReservedMicros
			},
			Wait: time.Sleep,
		}
	})
}

func TestConformanceSessionStore(t *testing.T) {
	dispatchtest.TestSessionStore(t, func(t *testing.T) dispatchtest.SessionsHarness {
		db := livetest.Valkey(t)
		return dispatchtest.SessionsHarness{Store: NewSessions(db.Client, SessionsConfig{}), Wait: time.Sleep,
			Write: func(thread string, value []byte) {
				if err := db.Client.Set(context.Background(), SessionKey(thread), value, time.Hour).Err(); err != nil {
					t.Fatal(err)
				}
			}}
	})
}
