package dispatchtest

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/pidispatch/pidispatch/dispatch"
)

// Budget is an in-memory dispatch.Budgeter with the Valkey budget's rules:
// counters of container starts per UTC day, ISO week and UTC month, globally
// and per scope; a reservation counts in every active window or none (a
// refusal consumes nothing, and names the narrowest full window); a negative
// cap refuses everything; the soft hold refuses a start that would take a
// window past floor(cap*SoftHoldPct/100); Release gives a grant back once,
// whatever copy of it is released.
type Budget struct {
	// DailyCap defaults to dispatch.DefaultDailyCap; WeeklyCap and MonthlyCap
	// 0 are no weekly or monthly window.
	DailyCap, WeeklyCap, MonthlyCap int
	// SoftHoldPct, 1..99, is the soft hold's share of each count window's
	// cap; 0 is none.
	SoftHoldPct int
	// Now is the clock of the windows. Default time.Now.
	Now func() time.Time
	// Err, when set, makes Reserve and Release fail with it, wrapped in
	// dispatch.ErrBudgetUnavailable.
	Err error

	mu     sync.Mutex
	counts map[string]int
}

var _ dispatch.Budgeter = (*Budget)(nil)

// NewBudget returns a Budget with the given caps.
func NewBudget(dailyCap, weeklyCap int) *Budget {
	return &Budget{DailyCap: dailyCap, WeeklyCap: weeklyCap, counts: map[string]int{}}
}

type budgetTicket struct {
	keys []string
	mu   sync.Mutex
	done bool
}

type budgetWindow struct {
	name, key string
	cap       int
}

func (b *Budget) windows(scope string, l *dispatch.ScopeLimit) []budgetWindow {
	now := time.Now()
	if b.Now != nil {
		now = b.Now()
	}
	now = now.UTC()
	day := now.Format("2006-01-02")
	monday := now.AddDate(0, 0, -((int(now.Weekday()) + 6) % 7)).Format("2006-01-02")
	month := now.Format("2006-01")
	var ws []budgetWindow
	if l != nil {
		for _, w := range []budgetWindow{
			{dispatch.WindowScopeDay, "scope-day:" + scope + ":" + day, l.Day},
			{dispatch.WindowScopeWeek, "scope-week:" + scope + ":" + monday, l.Week},
			{dispatch.WindowScopeMonth, "scope-month:" + scope + ":" + month, l.Month},
		} {
			if w.cap != 0 {
				ws = append(ws, w)
			}
		}
	}
	dailyCap := b.DailyCap
	if dailyCap == 0 {
		dailyCap = dispatch.DefaultDailyCap
	}
	ws = append(ws, budgetWindow{dispatch.WindowDay, "day:" + day, dailyCap})
	if b.WeeklyCap != 0 {
		ws = append(ws, budgetWindow{dispatch.WindowWeek, "week:" + monday, b.WeeklyCap})
	}
	if b.MonthlyCap != 0 {
		ws = append(ws, budgetWindow{dispatch.WindowMonth, "month:" + month, b.MonthlyCap})
	}
	return ws
}

// refuses returns the refusal of w for one more start, if any.
func (b *Budget) refuses(w budgetWindow) (dispatch.Reservation, bool) {
	n := b.counts[w.key]
	if n+1 > w.cap {
		return dispatch.Reservation{Window: w.name, Count: n, Cap: w.cap}, true
	}
	if b.SoftHoldPct > 0 && b.SoftHoldPct < 100 && w.cap > 0 && n+1 > w.cap*b.SoftHoldPct/100 {
		return dispatch.Reservation{Window: w.name, Count: n, Cap: w.cap, Soft: true}, true
	}
	return dispatch.Reservation{}, false
}

// Reserve counts one start of scope in every active window, or refuses.
func (b *Budget) Reserve(ctx context.Context, scope string, l *dispatch.ScopeLimit) (dispatch.Reservation, error) {
	if l != nil && l.Scope != scope {
		return dispatch.Reservation{}, fmt.Errorf("budget: the limits of scope %q were given for scope %q", l.Scope, scope)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.Err != nil {
		return dispatch.Reservation{}, fmt.Errorf("%w: reserve: %w", dispatch.ErrBudgetUnavailable, b.Err)
	}
	if b.counts == nil {
		b.counts = map[string]int{}
	}
	ws := b.windows(scope, l)
	for _, w := range ws {
		if r, ok := b.refuses(w); ok {
			return r, nil
		}
	}
	t := &budgetTicket{}
	res := dispatch.Reservation{Granted: true, Window: dispatch.WindowDay, Ticket: t}
	for _, w := range ws {
		b.counts[w.key]++
		t.keys = append(t.keys, w.key)
		if w.name == dispatch.WindowDay {
			res.Count, res.Cap = b.counts[w.key], w.cap
		}
	}
	return res, nil
}

// Release gives back a grant's windows, once.
func (b *Budget) Release(ctx context.Context, r dispatch.Reservation) error {
	t, _ := r.Ticket.(*budgetTicket)
	if !r.Granted || t == nil {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.done {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.Err != nil {
		return fmt.Errorf("%w: release: %w", dispatch.ErrBudgetUnavailable, b.Err)
	}
	for _, k := range t.keys {
		b.counts[k]--
	}
	t.done = true
	return nil
}

// Counts returns today's global counts: the day's and the week's (0 without
// a weekly cap).
func (b *Budget) Counts() (day, week int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, w := range b.windows("", nil) {
		switch w.name {
		case dispatch.WindowDay:
			day = b.counts[w.key]
		case dispatch.WindowWeek:
			week = b.counts[w.key]
		}
	}
	return day, week
}

// Month returns this month's global count (0 without a monthly cap).
func (b *Budget) Month() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, w := range b.windows("", nil) {
		if w.name == dispatch.WindowMonth {
			return b.counts[w.key]
		}
	}
	return 0
}

// SetErr sets Err under the budget's lock.
func (b *Budget) SetErr(err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.Err = err
}
