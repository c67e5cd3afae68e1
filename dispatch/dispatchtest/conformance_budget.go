package dispatchtest

import (
	"testing"

	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/jobs"
)

// BudgetHarness is one Budgeter under test and a reading of its global
// counts (today's, this week's and this month's container starts).
type BudgetHarness struct {
	Budget dispatch.Budgeter
	Counts func() (day, week int)
	Month  func() int
}

// BudgetCaps are the settings of a Budgeter under test: the global caps (0
// week or month: no window) and the soft hold's share (0: none).
type BudgetCaps struct {
	Daily, Weekly, Monthly, SoftHoldPct int
}

// budgetFactory makes a fresh Budgeter with the given caps.
type budgetFactory = func(t *testing.T, c BudgetCaps) BudgetHarness

// TestBudgeter runs the Budgeter contract (dispatch/budget.go) against the
// budgets newBudget makes with the given caps, a fresh one per case.
func TestBudgeter(t *testing.T, newBudget func(t *testing.T, c BudgetCaps) BudgetHarness) {
	cases := []struct {
		name string
		run  func(t *testing.T, nb budgetFactory)
	}{
		{"GrantsUpToTheDailyCap", budgetDailyCap},
		{"RefusalConsumesNothing", budgetRefusalFree},
		{"ReleaseGivesBackOnce", budgetReleaseOnce},
		{"ReleaseOfARefusalDoesNothing", budgetReleaseRefusal},
		{"ScopeDayCap", budgetScopeDay},
		{"ScopeWeekCap", budgetScopeWeek},
		{"NarrowestFullWindowRefuses", budgetNarrowest},
		{"WeeklyCap", budgetWeekly},
		{"NegativeCapRefusesEverything", budgetNegative},
		{"LimitOfAnotherScopeIsAnError", budgetMismatch},
		{"MonthlyCap", budgetMonthly},
		{"ScopeMonthCap", budgetScopeMonth},
		{"SoftHoldRefusesBeforeTheCap", budgetSoftHold},
		{"SoftHoldOfAScopeWindow", budgetSoftHoldScope},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { c.run(t, newBudget) })
	}
}

func reserve(t *testing.T, b dispatch.Budgeter, scope string, l *dispatch.ScopeLimit) dispatch.Reservation {
	t.Helper()
	r, err := b.Reserve(qctx(t), scope, l)
	if err != nil {
		t.Fatalf("Reserve(%s): %v", scope, err)
	}
	return r
}

func wantGrant(t *testing.T, r dispatch.Reservation, count, cap int) {
	t.Helper()
	if !r.Granted || r.Window != dispatch.WindowDay || r.Count != count || r.Cap != cap || r.Reason() != "" {
		t.Fatalf("reservation = %+v, want granted in day at %d/%d", r, count, cap)
	}
}

func wantRefusal(t *testing.T, r dispatch.Reservation, window string, count, cap int, reason jobs.Reason) {
	t.Helper()
	if r.Granted || r.Window != window || r.Count != count || r.Cap != cap || r.Reason() != reason {
		t.Fatalf("reservation = %+v (reason %q), want refused by %s at %d/%d, %s", r, r.Reason(), window, count, cap, reason)
	}
}

func wantCounts(t *testing.T, h BudgetHarness, day, week int) {
	t.Helper()
	if d, w := h.Counts(); d != day || w != week {
		t.Fatalf("counts = day %d, week %d; want %d, %d", d, w, day, week)
	}
}

func budgetDailyCap(t *testing.T, nb budgetFactory) {
	h := nb(t, BudgetCaps{Daily: 3})
	for i := 1; i <= 3; i++ {
		wantGrant(t, reserve(t, h.Budget, "/srv/a", nil), i, 3)
	}
	wantRefusal(t, reserve(t, h.Budget, "/srv/a", nil), dispatch.WindowDay, 3, 3, jobs.ReasonOverBudget)
	wantCounts(t, h, 3, 0)
}

func budgetRefusalFree(t *testing.T, nb budgetFactory) {
	h := nb(t, BudgetCaps{Daily: 1})
	r := reserve(t, h.Budget, "/srv/a", nil)
	wantGrant(t, r, 1, 1)
	for range 3 {
		wantRefusal(t, reserve(t, h.Budget, "/srv/a", nil), dispatch.WindowDay, 1, 1, jobs.ReasonOverBudget)
	}
	wantCounts(t, h, 1, 0)
	if err := h.Budget.Release(qctx(t), r); err != nil {
		t.Fatal(err)
	}
	wantCounts(t, h, 0, 0)
	wantGrant(t, reserve(t, h.Budget, "/srv/a", nil), 1, 1)
}

func budgetReleaseOnce(t *testing.T, nb budgetFactory) {
	h := nb(t, BudgetCaps{Daily: 5, Weekly: 5})
	r1 := reserve(t, h.Budget, "/srv/a", nil)
	reserve(t, h.Budget, "/srv/a", nil)
	wantCounts(t, h, 2, 2)
	cp := r1
	for _, r := range []dispatch.Reservation{r1, r1, cp} {
		if err := h.Budget.Release(qctx(t), r); err != nil {
			t.Fatal(err)
		}
	}
	wantCounts(t, h, 1, 1)
}

func budgetReleaseRefusal(t *testing.T, nb budgetFactory) {
	h := nb(t, BudgetCaps{Daily: 1})
	reserve(t, h.Budget, "/srv/a", nil)
	refused := reserve(t, h.Budget, "/srv/a", nil)
	for _, r := range []dispatch.Reservation{refused, {}} {
		if err := h.Budget.Release(qctx(t), r); err != nil {
			t.Fatalf("Release(%+v): %v", r, err)
		}
	}
	wantCounts(t, h, 1, 0)
}

func budgetScopeDay(t *testing.T, nb budgetFactory) {
	h := nb(t, BudgetCaps{Daily: 10})
	l := &dispatch.ScopeLimit{Scope: "/srv/a", Day: 1}
	wantGrant(t, reserve(t, h.Budget, "/srv/a", l), 1, 10)
	wantRefusal(t, reserve(t, h.Budget, "/srv/a", l), dispatch.WindowScopeDay, 1, 1, jobs.ReasonScopeCap)
	wantGrant(t, reserve(t, h.Budget, "/srv/b", nil), 2, 10)
	wantCounts(t, h, 2, 0)
}

func budgetScopeWeek(t *testing.T, nb budgetFactory) {
	h := nb(t, BudgetCaps{Daily: 10})
	l := &dispatch.ScopeLimit{Scope: "/srv/a", Week: 2}
	reserve(t, h.Budget, "/srv/a", l)
	reserve(t, h.Budget, "/srv/a", l)
	wantRefusal(t, reserve(t, h.Budget, "/srv/a", l), dispatch.WindowScopeWeek, 2, 2, jobs.ReasonScopeCap)
}

func budgetNarrowest(t *testing.T, nb budgetFactory) {
	h := nb(t, BudgetCaps{Daily: 1, Weekly: 1})
	l := &dispatch.ScopeLimit{Scope: "/srv/a", Day: 1, Week: 1}
	reserve(t, h.Budget, "/srv/a", l)
	wantRefusal(t, reserve(t, h.Budget, "/srv/a", l), dispatch.WindowScopeDay, 1, 1, jobs.ReasonScopeCap)
	wantRefusal(t, reserve(t, h.Budget, "/srv/b", nil), dispatch.WindowDay, 1, 1, jobs.ReasonOverBudget)
}

func budgetWeekly(t *testing.T, nb budgetFactory) {
	h := nb(t, BudgetCaps{Daily: 5, Weekly: 1})
	wantGrant(t, reserve(t, h.Budget, "/srv/a", nil), 1, 5)
	wantRefusal(t, reserve(t, h.Budget, "/srv/a", nil), dispatch.WindowWeek, 1, 1, jobs.ReasonOverBudget)
	wantCounts(t, h, 1, 1)
}

func budgetNegative(t *testing.T, nb budgetFactory) {
	h := nb(t, BudgetCaps{Daily: -1})
	wantRefusal(t, reserve(t, h.Budget, "/srv/a", nil), dispatch.WindowDay, 0, -1, jobs.ReasonOverBudget)
	wantCounts(t, h, 0, 0)
}

func budgetMismatch(t *testing.T, nb budgetFactory) {
	h := nb(t, BudgetCaps{Daily: 5})
	r, err := h.Budget.Reserve(qctx(t), "/srv/a", &dispatch.ScopeLimit{Scope: "/srv/b", Day: 1})
	if err == nil || r.Granted {
		t.Fatalf("Reserve with another scope's limits = %+v, %v; want an error", r, err)
	}
	wantCounts(t, h, 0, 0)
}

func wantMonth(t *testing.T, h BudgetHarness, month int) {
	t.Helper()
	if m := h.Month(); m != month {
		t.Fatalf("month count = %d, want %d", m, month)
	}
}

func budgetMonthly(t *testing.T, nb budgetFactory) {
	h := nb(t, BudgetCaps{Daily: 5, Weekly: 5, Monthly: 2})
	wantGrant(t, reserve(t, h.Budget, "/srv/a", nil), 1, 5)
	wantGrant(t, reserve(t, h.Budget, "/srv/a", nil), 2, 5)
	for range 2 {
		wantRefusal(t, reserve(t, h.Budget, "/srv/a", nil), dispatch.WindowMonth, 2, 2, jobs.ReasonOverBudget)
	}
	wantCounts(t, h, 2, 2)
	wantMonth(t, h, 2)
}

func budgetScopeMonth(t *testing.T, nb budgetFactory) {
	h := nb(t, BudgetCaps{Daily: 10, Monthly: 10})
	l := &dispatch.ScopeLimit{Scope: "/srv/a", Month: 1}
	wantGrant(t, reserve(t, h.Budget, "/srv/a", l), 1, 10)
	wantRefusal(t, reserve(t, h.Budget, "/srv/a", l), dispatch.WindowScopeMonth, 1, 1, jobs.ReasonScopeCap)
	wantGrant(t, reserve(t, h.Budget, "/srv/b", nil), 2, 10)
	wantCounts(t, h, 2, 0)
	wantMonth(t, h, 2)
}

func budgetSoftHold(t *testing.T, nb budgetFactory) {
	// 80% of 5 is 4: the fifth start is held softly, though the cap has room.
	h := nb(t, BudgetCaps{Daily: 5, SoftHoldPct: 80})
	for i := 1; i <= 4; i++ {
		wantGrant(t, reserve(t, h.Budget, "/srv/a", nil), i, 5)
	}
	for range 2 {
		r := reserve(t, h.Budget, "/srv/a", nil)
		wantRefusal(t, r, dispatch.WindowDay, 4, 5, jobs.ReasonSoftHold)
		if !r.Soft {
			t.Fatalf("reservation = %+v, want Soft", r)
		}
	}
	wantCounts(t, h, 4, 0)

	// The month's hold (floor(3*50/100) = 1) refuses while the day (hold 5)
	// and the month's own cap have room.
	h = nb(t, BudgetCaps{Daily: 10, Monthly: 3, SoftHoldPct: 50})
	wantGrant(t, reserve(t, h.Budget, "/srv/a", nil), 1, 10)
	wantRefusal(t, reserve(t, h.Budget, "/srv/a", nil), dispatch.WindowMonth, 1, 3, jobs.ReasonSoftHold)
	wantCounts(t, h, 1, 0)
	wantMonth(t, h, 1)
}

func budgetSoftHoldScope(t *testing.T, nb budgetFactory) {
	h := nb(t, BudgetCaps{Daily: 100, SoftHoldPct: 50})
	l := &dispatch.ScopeLimit{Scope: "/srv/a", Day: 2, Week: 1}
	// The scope's day (cap 2, hold 1) has room for one start; its week (cap
	// 1, hold 0) has room under the cap but none under the hold.
	wantRefusal(t, reserve(t, h.Budget, "/srv/a", l), dispatch.WindowScopeWeek, 0, 1, jobs.ReasonSoftHold)
	l = &dispatch.ScopeLimit{Scope: "/srv/a", Day: 2}
	wantGrant(t, reserve(t, h.Budget, "/srv/a", l), 1, 100)
	wantRefusal(t, reserve(t, h.Budget, "/srv/a", l), dispatch.WindowScopeDay, 1, 2, jobs.ReasonSoftHold)
	wantCounts(t, h, 1, 0)
}
