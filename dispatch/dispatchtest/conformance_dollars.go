package dispatchtest

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pidispatch/pidispatch/dispatch"
)

// DollarCaps are the global caps of a DollarBudget under test, in
// micro-dollars (0: no window).
type DollarCaps struct {
	Daily, Weekly, Monthly int64
}

// DollarHarness is one DollarBudget under test and what the suite needs
// around it.
type DollarHarness struct {
	Budget dispatch.DollarBudget
	// Peer returns another DollarBudget over the same windows, through a
	// client of its own (another host); a fake may return Budget.
	Peer func() dispatch.DollarBudget
	// Day reads the global day window: settled spend and live reservations.
	Day func() (spent, reserved int64)
	// Wait lets d pass on the budget's clock: a fake's clock moves, a live
	// test sleeps.
	Wait func(d time.Duration)
}

type dollarFactory = func(t *testing.T, c DollarCaps) DollarHarness

// usd is a whole number of dollars in micro-dollars.
const usd = 1_000_000

// TestDollarBudget runs the DollarBudget contract (dispatch/spend.go)
// against the budgets newBudget makes with the given caps, a fresh one per
// case.
func TestDollarBudget(t *testing.T, newBudget func(t *testing.T, c DollarCaps) DollarHarness) {
	cases := []struct {
		name string
		run  func(t *testing.T, nb dollarFactory)
	}{
		{"GrantWithinCap", dollarGrant},
		{"RefusalNamesTheNarrowestFullWindowAndHoldsNothing", dollarNarrowest},
		{"SettleReplacesTheReservation", dollarSettle},
		{"DoubleSettleCountsOnce", dollarSettleOnce},
		{"ReservationLapsesAfterItsTTL", dollarLapse},
		{"ScopeDollarWindowRefusesWhileTheGlobalHasRoom", dollarScope},
		{"LimitOfAnotherScopeIsAnError", dollarMismatch},
		{"ConcurrentReserversNeverOverGrant", dollarConcurrent},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { c.run(t, newBudget) })
	}
}

func reserveUSD(t *testing.T, b dispatch.DollarBudget, scope string, l *dispatch.ScopeLimit, micros int64, ttl time.Duration) dispatch.DollarReservation {
	t.Helper()
	r, err := b.ReserveDollars(qctx(t), "job-1", scope, l, micros, ttl)
	if err != nil {
		t.Fatalf("ReserveDollars(%s, %d): %v", scope, micros, err)
	}
	return r
}

func wantDollarGrant(t *testing.T, r dispatch.DollarReservation, window string, used, cap int64) {
	t.Helper()
	if !r.Granted || r.Window != window || r.UsedMicros != used || r.CapMicros != cap || r.Ticket == nil {
		t.Fatalf("reservation = %+v, want granted in %s at %d/%d", r, window, used, cap)
	}
}

func wantDollarRefusal(t *testing.T, r dispatch.DollarReservation, window string, used, cap int64) {
	t.Helper()
	if r.Granted || r.Window != window || r.UsedMicros != used || r.CapMicros != cap || r.Ticket != nil {
		t.Fatalf("reservation = %+v, want refused by %s at %d/%d", r, window, used, cap)
	}
}

func wantDay(t *testing.T, h DollarHarness, spent, reserved int64) {
	t.Helper()
	if s, r := h.Day(); s != spent || r != reserved {
		t.Fatalf("day window = spent %d, reserved %d; want %d, %d", s, r, spent, reserved)
	}
}

func settle(t *testing.T, b dispatch.DollarBudget, r dispatch.DollarReservation, spent int64) {
	t.Helper()
	if err := b.SettleDollars(qctx(t), r, spent); err != nil {
		t.Fatalf("SettleDollars(%d): %v", spent, err)
	}
}

func dollarGrant(t *testing.T, nb dollarFactory) {
	h := nb(t, DollarCaps{Daily: 10 * usd})
	wantDollarGrant(t, reserveUSD(t, h.Budget, "/srv/a", nil, 3*usd, time.Hour), dispatch.WindowDay, 3*usd, 10*usd)
	wantDollarGrant(t, reserveUSD(t, h.Budget, "/srv/a", nil, 7*usd, time.Hour), dispatch.WindowDay, 10*usd, 10*usd)
	wantDay(t, h, 0, 10*usd)
}

func dollarNarrowest(t *testing.T, nb dollarFactory) {
	h := nb(t, DollarCaps{Daily: 10 * usd, Weekly: 4 * usd, Monthly: 4 * usd})
	wantDollarGrant(t, reserveUSD(t, h.Budget, "/srv/a", nil, 3*usd, time.Hour), dispatch.WindowDay, 3*usd, 10*usd)
	for range 2 {
		wantDollarRefusal(t, reserveUSD(t, h.Budget, "/srv/a", nil, 2*usd, time.Hour), dispatch.WindowWeek, 3*usd, 4*usd)
	}
	wantDay(t, h, 0, 3*usd)
	wantDollarGrant(t, reserveUSD(t, h.Budget, "/srv/a", nil, usd, time.Hour), dispatch.WindowDay, 4*usd, 10*usd)
	// Every window full at once: the day is named.
	h = nb(t, DollarCaps{Daily: usd, Weekly: usd, Monthly: usd})
	reserveUSD(t, h.Budget, "/srv/a", nil, usd, time.Hour)
	wantDollarRefusal(t, reserveUSD(t, h.Budget, "/srv/a", nil, 1, time.Hour), dispatch.WindowDay, usd, usd)
	// A negative cap refuses everything.
	h = nb(t, DollarCaps{Daily: -1})
	wantDollarRefusal(t, reserveUSD(t, h.Budget, "/srv/a", nil, 0, time.Hour), dispatch.WindowDay, 0, -1)
}

func dollarSettle(t *testing.T, nb dollarFactory) {
	h := nb(t, DollarCaps{Daily: 6 * usd, Monthly: 100 * usd})
	r := reserveUSD(t, h.Budget, "/srv/a", nil, 5*usd, time.Hour)
	wantDollarRefusal(t, reserveUSD(t, h.Budget, "/srv/a", nil, 2*usd, time.Hour), dispatch.WindowDay, 5*usd, 6*usd)
	settle(t, h.Budget, r, 1_250_000)
	wantDay(t, h, 1_250_000, 0)
	wantDollarGrant(t, reserveUSD(t, h.Budget, "/srv/a", nil, 4_750_000, time.Hour), dispatch.WindowDay, 6*usd, 6*usd)
	wantDollarRefusal(t, reserveUSD(t, h.Budget, "/srv/a", nil, 1, time.Hour), dispatch.WindowDay, 6*usd, 6*usd)
	wantDay(t, h, 1_250_000, 4_750_000)
}

func dollarSettleOnce(t *testing.T, nb dollarFactory) {
	h := nb(t, DollarCaps{Daily: 10 * usd})
	r := reserveUSD(t, h.Budget, "/srv/a", nil, 2*usd, time.Hour)
	reserveUSD(t, h.Budget, "/srv/a", nil, 3*usd, time.Hour)
	cp := r
	for _, x := range []dispatch.DollarReservation{r, r, cp} {
		settle(t, h.Budget, x, usd)
	}
	wantDay(t, h, usd, 3*usd)
	refused := reserveUSD(t, h.Budget, "/srv/a", nil, 20*usd, time.Hour)
	for _, x := range []dispatch.DollarReservation{refused, {}} {
		settle(t, h.Budget, x, 5*usd)
	}
	wantDay(t, h, usd, 3*usd)
}

func dollarLapse(t *testing.T, nb dollarFactory) {
	h := nb(t, DollarCaps{Daily: 5 * usd})
	crashed := reserveUSD(t, h.Budget, "/srv/a", nil, 4*usd, 1500*time.Millisecond)
	wantDollarRefusal(t, reserveUSD(t, h.Budget, "/srv/a", nil, 4*usd, time.Hour), dispatch.WindowDay, 4*usd, 5*usd)
	h.Wait(1800 * time.Millisecond)
	wantDay(t, h, 0, 0)
	wantDollarGrant(t, reserveUSD(t, h.Budget, "/srv/a", nil, 4*usd, time.Hour), dispatch.WindowDay, 4*usd, 5*usd)
	// The crashed job's host comes back and settles: what it spent counts.
	settle(t, h.Budget, crashed, 500_000)
	wantDay(t, h, 500_000, 4*usd)
	settle(t, h.Budget, crashed, 500_000)
	wantDay(t, h, 500_000, 4*usd)
}

func dollarScope(t *testing.T, nb dollarFactory) {
	h := nb(t, DollarCaps{Daily: 100 * usd})
	l := &dispatch.ScopeLimit{Scope: "/srv/a", DailyCostMicros: 2 * usd}
	wantDollarGrant(t, reserveUSD(t, h.Budget, "/srv/a", l, 1_500_000, time.Hour), dispatch.WindowScopeDay, 1_500_000, 2*usd)
	wantDollarRefusal(t, reserveUSD(t, h.Budget, "/srv/a", l, 1_500_000, time.Hour), dispatch.WindowScopeDay, 1_500_000, 2*usd)
	wantDollarGrant(t, reserveUSD(t, h.Budget, "/srv/b", nil, 1_500_000, time.Hour), dispatch.WindowDay, 3*usd, 100*usd)
	wantDay(t, h, 0, 3*usd)

	w := &dispatch.ScopeLimit{Scope: "/srv/c", Day: 5, WeeklyCostMicros: usd, MonthlyCostMicros: 50 * usd}
	wantDollarGrant(t, reserveUSD(t, h.Budget, "/srv/c", w, usd, time.Hour), dispatch.WindowScopeWeek, usd, usd)
	wantDollarRefusal(t, reserveUSD(t, h.Budget, "/srv/c", w, 1, time.Hour), dispatch.WindowScopeWeek, usd, usd)
	// A row with no dollar window adds none.
	wantDollarGrant(t, reserveUSD(t, h.Budget, "/srv/d", &dispatch.ScopeLimit{Scope: "/srv/d", Day: 1}, usd, time.Hour), dispatch.WindowDay, 5*usd, 100*usd)
}

func dollarMismatch(t *testing.T, nb dollarFactory) {
	h := nb(t, DollarCaps{Daily: 10 * usd})
	r, err := h.Budget.ReserveDollars(qctx(t), "job-1", "/srv/a", &dispatch.ScopeLimit{Scope: "/srv/b", DailyCostMicros: usd}, usd, time.Hour)
	if err == nil || r.Granted {
		t.Fatalf("ReserveDollars with another scope's limits = %+v, %v; want an error", r, err)
	}
	if r, err := h.Budget.ReserveDollars(qctx(t), "job-1", "/srv/a", nil, -1, time.Hour); err == nil || r.Granted {
		t.Fatalf("ReserveDollars(-1) = %+v, %v; want an error", r, err)
	}
	wantDay(t, h, 0, 0)
}

// dollarConcurrent: 16 reservers on 3 budgets (3 clients) race for a day
// that holds 5 of them; exactly 5 win, and a sampler never sees the day's use
// above its cap.
func dollarConcurrent(t *testing.T, nb dollarFactory) {
	h := nb(t, DollarCaps{Daily: 5 * usd})
	budgets := []dispatch.DollarBudget{h.Budget, h.Peer(), h.Peer()}
	var granted, refused atomic.Int32
	var over atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	errs := make(chan error, 16)
	for i := range 16 {
		wg.Go(func() {
			<-start
			r, err := budgets[i%3].ReserveDollars(qctx(t), "job-race", "/srv/a", nil, usd, time.Hour)
			switch {
			case err != nil:
				errs <- err
			case r.Granted:
				granted.Add(1)
			default:
				refused.Add(1)
			}
		})
	}
	done := make(chan struct{})
	var samples atomic.Int32
	var sampler sync.WaitGroup
	sampler.Go(func() {
		for {
			if s, r := h.Day(); s+r > 5*usd {
				over.Store(s + r)
			}
			samples.Add(1)
			select {
			case <-done:
				return
			default:
			}
		}
	})
	close(start)
	wg.Wait()
	close(done)
	sampler.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("ReserveDollars: %v", err)
	}
	if granted.Load() != 5 || refused.Load() != 11 {
		t.Fatalf("granted %d, refused %d; want 5 and 11", granted.Load(), refused.Load())
	}
	if v := over.Load(); v != 0 {
		t.Fatalf("a sample saw %d micro-dollars used in a day capped at %d", v, 5*usd)
	}
	if samples.Load() == 0 {
		t.Fatal("the sampler never read the day")
	}
	wantDay(t, h, 0, 5*usd)
}
