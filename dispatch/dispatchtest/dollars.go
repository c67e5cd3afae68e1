package dispatchtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sync"
	"time"

	"github.com/pidispatch/pidispatch/dispatch"
)

// Dollars is an in-memory dispatch.DollarBudget with the Valkey dollar
// windows' rules (fleetstate/dollars.go): a window's use is its settled
// spend plus its live reservations; a reservation is held in every active
// window (the global day, ISO week and month, then the scope row's) or in
// none, and a refusal names the narrowest window that cannot hold it; a
// reservation lapses at its ttl; a settle replaces it by the real spend in
// the windows it was held in, once, and still counts the spend after a
// lapse. It starts no goroutine: a reservation lapses when the clock passes
// its expiry (Advance moves the clock).
type Dollars struct {
	// DailyMicros, WeeklyMicros and MonthlyMicros are the global caps; 0 is
	// no window, a negative cap refuses everything.
	DailyMicros, WeeklyMicros, MonthlyMicros int64
	// Now is the budget's clock (the server's, on Valkey). Default
	// time.Now, moved on by Advance.
	Now func() time.Time
	// Err, when set, fails ReserveDollars and SettleDollars, wrapped in
	// dispatch.ErrBudgetUnavailable.
	Err error

	mu      sync.Mutex
	offset  time.Duration
	windows map[string]*fakeDollarWindow
}

var _ dispatch.DollarBudget = (*Dollars)(nil)

type fakeDollarWindow struct {
	settled int64
	res     map[string]fakeDollarHold // member -> hold
}

type fakeDollarHold struct {
	micros  int64
	expires time.Time
}

type fakeDollarTicket struct {
	member string
	keys   []string
	mu     sync.Mutex
	done   bool
}

// NewDollars returns a Dollars with the given caps.
func NewDollars(daily, weekly, monthly int64) *Dollars {
	return &Dollars{DailyMicros: daily, WeeklyMicros: weekly, MonthlyMicros: monthly}
}

// Advance moves the budget's clock on by d.
func (b *Dollars) Advance(d time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.offset += d
}

// SetErr sets Err under the budget's lock.
func (b *Dollars) SetErr(err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.Err = err
}

func (b *Dollars) now() time.Time {
	now := time.Now()
	if b.Now != nil {
		now = b.Now()
	}
	return now.Add(b.offset).UTC()
}

type fakeDollarSpec struct {
	name, key string
	cap       int64
}

func (b *Dollars) specs(scope string, l *dispatch.ScopeLimit, now time.Time) []fakeDollarSpec {
	day := now.Format("2006-01-02")
	monday := now.AddDate(0, 0, -((int(now.Weekday()) + 6) % 7)).Format("2006-01-02")
	month := now.Format("2006-01")
	var all []fakeDollarSpec
	if l != nil {
		all = append(all,
			fakeDollarSpec{dispatch.WindowScopeDay, "scope-day:" + scope + ":" + day, l.DailyCostMicros},
			fakeDollarSpec{dispatch.WindowScopeWeek, "scope-week:" + scope + ":" + monday, l.WeeklyCostMicros},
			fakeDollarSpec{dispatch.WindowScopeMonth, "scope-month:" + scope + ":" + month, l.MonthlyCostMicros})
	}
	all = append(all,
		fakeDollarSpec{dispatch.WindowDay, "day:" + day, b.DailyMicros},
		fakeDollarSpec{dispatch.WindowWeek, "week:" + monday, b.WeeklyMicros},
		fakeDollarSpec{dispatch.WindowMonth, "month:" + month, b.MonthlyMicros})
	var out []fakeDollarSpec
	for _, s := range all {
		if s.cap != 0 {
			out = append(out, s)
		}
	}
	return out
}

// window returns key's window with its lapsed reservations dropped.
func (b *Dollars) window(key string, now time.Time) *fakeDollarWindow {
	if b.windows == nil {
		b.windows = map[string]*fakeDollarWindow{}
	}
	w := b.windows[key]
	if w == nil {
		w = &fakeDollarWindow{res: map[string]fakeDollarHold{}}
		b.windows[key] = w
	}
	for m, h := range w.res {
		if !h.expires.After(now) {
			delete(w.res, m)
		}
	}
	return w
}

func (w *fakeDollarWindow) used() int64 {
	n := w.settled
	for _, h := range w.res {
		n += h.micros
	}
	return n
}

// ReserveDollars holds micros in every active window, or refuses.
func (b *Dollars) ReserveDollars(ctx context.Context, jobID, scope string, l *dispatch.ScopeLimit, micros int64, ttl time.Duration) (dispatch.DollarReservation, error) {
	switch {
	case l != nil && l.Scope != scope:
		return dispatch.DollarReservation{}, fmt.Errorf("dollars: the limits of scope %q were given for scope %q", l.Scope, scope)
	case micros < 0:
		return dispatch.DollarReservation{}, fmt.Errorf("dollars: cannot reserve %d micro-dollars", micros)
	case ttl < time.Millisecond:
		return dispatch.DollarReservation{}, fmt.Errorf("dollars: reservation ttl %s is under a millisecond", ttl)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.Err != nil {
		return dispatch.DollarReservation{}, fmt.Errorf("%w: reserve dollars: %w", dispatch.ErrBudgetUnavailable, b.Err)
	}
	now := b.now()
	specs := b.specs(scope, l, now)
	for _, s := range specs {
		if u := b.window(s.key, now).used(); u+micros > s.cap {
			return dispatch.DollarReservation{Window: s.name, UsedMicros: u, CapMicros: s.cap}, nil
		}
	}
	var token [8]byte
	_, _ = rand.Read(token[:])
	t := &fakeDollarTicket{member: jobID + "#" + hex.EncodeToString(token[:])}
	r := dispatch.DollarReservation{Granted: true, Ticket: t}
	for i, s := range specs {
		w := b.window(s.key, now)
		w.res[t.member] = fakeDollarHold{micros: micros, expires: now.Add(ttl)}
		t.keys = append(t.keys, s.key)
		if i == 0 {
			r.Window, r.UsedMicros, r.CapMicros = s.name, w.used(), s.cap
		}
	}
	return r, nil
}

// SettleDollars replaces a grant's reservation by spentMicros, once.
func (b *Dollars) SettleDollars(ctx context.Context, r dispatch.DollarReservation, spentMicros int64) error {
	t, _ := r.Ticket.(*fakeDollarTicket)
	if !r.Granted || t == nil || len(t.keys) == 0 {
		return nil
	}
	if spentMicros < 0 {
		return fmt.Errorf("dollars: cannot settle %d micro-dollars", spentMicros)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.done {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.Err != nil {
		return fmt.Errorf("%w: settle dollars: %w", dispatch.ErrBudgetUnavailable, b.Err)
	}
	now := b.now()
	for _, k := range t.keys {
		w := b.window(k, now)
		delete(w.res, t.member)
		w.settled += spentMicros
	}
	t.done = true
	return nil
}

// Window reads one global window of the current time (dispatch.WindowDay,
// WindowWeek or WindowMonth): its settled spend and live reservations.
func (b *Dollars) Window(name string) (spent, reserved int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	for _, s := range b.specs("", nil, now) {
		if s.name == name {
			w := b.window(s.key, now)
			return w.settled, w.used() - w.settled
		}
	}
	return 0, 0
}
