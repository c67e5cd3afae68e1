package dispatchtest

import (
	"testing"

	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/jobs"
)

// BudgetHarness is one Budgeter under test and a reading of its global
// counts (today's and this week's container starts).
type BudgetHarness struct {
	Budget dispatch.Budgeter
	Counts func() (day, week int)
}

// FakeBudgetHarness is the harness of a fresh fake Budget.
func FakeBudgetHarness(t *testing.T, dailyCap, weeklyCap int) BudgetHarness {
	b := NewBudget(dailyCap, weeklyCap)
	return BudgetHarness{Budget: b, Counts: b.Counts}
}

// TestBudgeter runs the Budgeter contract (dispatch/budget.go) against the
// budgets newBudget makes with the given caps, a fresh one per case.
func TestBudgeter(t *testing.T, newBudget func(t *testing.T, dailyCap, weeklyCap int) BudgetHarness) {
	cases := []struct {
		name string
		run  func(t *testing.T, nb func(t *testing.T, d, w int) BudgetHarness)
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

func wantRefusal(t *testing.T, r dispatch.Reservation, window string, count, cap int, reason string) {
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

func budgetDailyCap(t *testing.T, nb func(t *testing.T, d, w int) BudgetHarness) {
	h := nb(t, 3, 0)
	for i := 1; i <= 3; i++ {
		wantGrant(t, reserve(t, h.Budget, "/srv/a", nil), i, 3)
	}
	wantRefusal(t, reserve(t, h.Budget, "/srv/a", nil), dispatch.WindowDay, 3, 3, jobs.ReasonOverBudget)
	wantCounts(t, h, 3, 0)
}

func budgetRefusalFree(t *testing.T, nb func(t *testing.T, d, w int) BudgetHarness) {
	h := nb(t, 1, 0)
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

func budgetReleaseOnce(t *testing.T, nb func(t *testing.T, d, w int) BudgetHarness) {
	h := nb(t, 5, 5)
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

func budgetReleaseRefusal(t *testing.T, nb func(t *testing.T, d, w int) BudgetHarness) {
	h := nb(t, 1, 0)
	reserve(t, h.Budget, "/srv/a", nil)
	refused := reserve(t, h.Budget, "/srv/a", nil)
	for _, r := range []dispatch.Reservation{refused, {}} {
		if err := h.Budget.Release(qctx(t), r); err != nil {
			t.Fatalf("Release(%+v): %v", r, err)
		}
	}
	wantCounts(t, h, 1, 0)
}

func budgetScopeDay(t *testing.T, nb func(t *testing.T, d, w int) BudgetHarness) {
	h := nb(t, 10, 0)
	l := &dispatch.ScopeLimit{Scope: "/srv/a", Day: 1}
	wantGrant(t, reserve(t, h.Budget, "/srv/a", l), 1, 10)
	wantRefusal(t, reserve(t, h.Budget, "/srv/a", l), dispatch.WindowScopeDay, 1, 1, jobs.ReasonScopeCap)
	wantGrant(t, reserve(t, h.Budget, "/srv/b", nil), 2, 10)
	wantCounts(t, h, 2, 0)
}

func budgetScopeWeek(t *testing.T, nb func(t *testing.T, d, w int) BudgetHarness) {
	h := nb(t, 10, 0)
	l := &dispatch.ScopeLimit{Scope: "/srv/a", Week: 2}
	reserve(t, h.Budget, "/srv/a", l)
	reserve(t, h.Budget, "/srv/a", l)
	wantRefusal(t, reserve(t, h.Budget, "/srv/a", l), dispatch.WindowScopeWeek, 2, 2, jobs.ReasonScopeCap)
}

func budgetNarrowest(t *testing.T, nb func(t *testing.T, d, w int) BudgetHarness) {
	h := nb(t, 1, 1)
	l := &dispatch.ScopeLimit{Scope: "/srv/a", Day: 1, Week: 1}
	reserve(t, h.Budget, "/srv/a", l)
	wantRefusal(t, reserve(t, h.Budget, "/srv/a", l), dispatch.WindowScopeDay, 1, 1, jobs.ReasonScopeCap)
	wantRefusal(t, reserve(t, h.Budget, "/srv/b", nil), dispatch.WindowDay, 1, 1, jobs.ReasonOverBudget)
}

func budgetWeekly(t *testing.T, nb func(t *testing.T, d, w int) BudgetHarness) {
	h := nb(t, 5, 1)
	wantGrant(t, reserve(t, h.Budget, "/srv/a", nil), 1, 5)
	wantRefusal(t, reserve(t, h.Budget, "/srv/a", nil), dispatch.WindowWeek, 1, 1, jobs.ReasonOverBudget)
	wantCounts(t, h, 1, 1)
}

func budgetNegative(t *testing.T, nb func(t *testing.T, d, w int) BudgetHarness) {
	h := nb(t, -1, 0)
	wantRefusal(t, reserve(t, h.Budget, "/srv/a", nil), dispatch.WindowDay, 0, -1, jobs.ReasonOverBudget)
	wantCounts(t, h, 0, 0)
}

func budgetMismatch(t *testing.T, nb func(t *testing.T, d, w int) BudgetHarness) {
	h := nb(t, 5, 0)
	r, err := h.Budget.Reserve(qctx(t), "/srv/a", &dispatch.ScopeLimit{Scope: "/srv/b", Day: 1})
	if err == nil || r.Granted {
		t.Fatalf("Reserve with another scope's limits = %+v, %v; want an error", r, err)
	}
	wantCounts(t, h, 0, 0)
}
