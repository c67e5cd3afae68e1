package fleetstate

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/internal/bounded"
	"github.com/pidispatch/pidispatch/internal/check"
)

// dollarSettleTTL is the settle guard's lifetime: it outlives every window key
// a settle can write, so a retry within the month's window never counts twice.
const dollarSettleTTL = budgetMonthTTL + 24*time.Hour

// maxDollarJobID bounds the job id carried in a reservation's member.
const maxDollarJobID = 256

// DollarsConfig tunes a Dollars. The zero value is valid and has no window.
type DollarsConfig struct {
	// DailyMicros, WeeklyMicros and MonthlyMicros are the fleet-wide dollar
	// caps, in micro-dollars, of the UTC day, the ISO week (from Monday, UTC)
	// and the UTC month. 0 disables a window; a negative cap refuses every
	// reservation.
	DailyMicros, WeeklyMicros, MonthlyMicros int64
	// CallTimeout bounds every Valkey call. Defaults to 2s.
	CallTimeout time.Duration
	// Logger receives reachability transitions (dollars_unreachable,
	// dollars_restored), once each. Defaults to discarding.
	Logger *slog.Logger
	// Host is this worker's name, the host attribute of every log line.
	Host string
}

// Dollars holds the fleet's dollar windows on Valkey. A job reserves its
// per-job dollar cap in every active window when it starts and settles to its
// real spend when it ends; a window's use is its settled spend plus its live
// reservations. A reservation whose worker died is never settled: it lapses at
// its ttl and stops counting, so a crashed host cannot hold a window shut.
//
// Every reservation and settle is one script on Valkey's clock, so every host
// agrees on the windows and no two reservations can both fit the same room.
//
// A Dollars is safe for concurrent use. It does not own the client.
type Dollars struct {
	client redis.UniversalClient
	cfg    DollarsConfig
	health budgetHealth
	calls  bounded.Calls
}

var _ dispatch.DollarBudget = (*Dollars)(nil)

// NewDollars returns a Dollars over client.
func NewDollars(client redis.UniversalClient, cfg DollarsConfig) *Dollars {
	if cfg.CallTimeout <= 0 {
		cfg.CallTimeout = DefaultBudgetCallTimeout
	}
	health := storeHealth(cfg.Logger, cfg.Host, "dollars")
	return &Dollars{client: client, cfg: cfg, health: health}
}

// dollarTicket is a granted dollar reservation's handle for SettleDollars.
type dollarTicket struct {
	member  string   // <jobId>#<token> in every window
	token   string   // names the settle guard
	keys    []string // the settled-spend keys of the windows it was held in
	kinds   []string // their kinds, for the keys' TTLs
	settled *releaseRecord
}

// dollarWindow is one window as the scripts receive it.
type dollarWindow struct {
	name, prefix, kind string
	cap                int64
}

// windows lists the active dollar windows, narrowest first: the scope's day,
// week and month (when limit sets them), then the global day, week and month.
func (d *Dollars) windows(scope string, limit *dispatch.ScopeLimit) []dollarWindow {
	var all []dollarWindow
	if limit != nil {
		all = append(all,
			dollarWindow{dispatch.WindowScopeDay, dollarScopeDayPrefix(scope), "d", limit.DailyCostMicros},
			dollarWindow{dispatch.WindowScopeWeek, dollarScopeWeekPrefix(scope), "w", limit.WeeklyCostMicros},
			dollarWindow{dispatch.WindowScopeMonth, dollarScopeMonthPrefix(scope), "m", limit.MonthlyCostMicros})
	}
	all = append(all,
		dollarWindow{dispatch.WindowDay, dollarPrefix, "d", d.cfg.DailyMicros},
		dollarWindow{dispatch.WindowWeek, dollarWeekPrefix, "w", d.cfg.WeeklyMicros},
		dollarWindow{dispatch.WindowMonth, dollarMonthPrefix, "m", d.cfg.MonthlyMicros})
	var ws []dollarWindow
	for _, w := range all {
		if w.cap != 0 {
			ws = append(ws, w)
		}
	}
	return ws
}

// keyTTL is the lifetime of a window key of kind.
func keyTTL(kind string) time.Duration {
	switch kind {
	case "w":
		return budgetWeekTTL
	case "m":
		return budgetMonthTTL
	}
	return budgetDayTTL
}

// ReserveDollars holds micros of jobID in every active window of the global
// caps and of limit (nil: the scope has no row; a row without dollar windows
// adds none), for ttl. A refusal names the narrowest window that cannot hold
// micros and holds nothing. An error wraps dispatch.ErrBudgetUnavailable when
// the windows could not be read: the job must not start.
func (d *Dollars) ReserveDollars(ctx context.Context, jobID, scope string, limit *dispatch.ScopeLimit, micros int64, ttl time.Duration) (dispatch.DollarReservation, error) {
	return d.reserve(ctx, jobID, scope, limit, micros, ttl, "")
}

// reserve is ReserveDollars with the script's clock override (see Budget.reserve).
func (d *Dollars) reserve(ctx context.Context, jobID, scope string, limit *dispatch.ScopeLimit, micros int64, ttl time.Duration, nowMs string) (dispatch.DollarReservation, error) {
	switch {
	case limit != nil && limit.Scope != scope:
		return dispatch.DollarReservation{}, fmt.Errorf("dollars: the limits of scope %s were given for scope %s", check.Quote(limit.Scope), check.Quote(scope))
	case micros < 0:
		return dispatch.DollarReservation{}, fmt.Errorf("dollars: cannot reserve %d micro-dollars", micros)
	case ttl < time.Millisecond:
		return dispatch.DollarReservation{}, fmt.Errorf("dollars: reservation ttl %s is under a millisecond", ttl)
	}
	token := newReleaseToken()
	t := &dollarTicket{member: dollarMember(jobID, token), token: token, settled: &releaseRecord{}}
	windows := d.windows(scope, limit)
	if len(windows) == 0 {
		return dispatch.DollarReservation{Granted: true, Ticket: t}, nil
	}
	args := []any{nowMs, ttl.Milliseconds(), t.member, micros, dollarResSuffix, dollarAmtSuffix,
		budgetDayTTL.Milliseconds(), budgetWeekTTL.Milliseconds(), budgetMonthTTL.Milliseconds()}
	for _, w := range windows {
		args = append(args, w.prefix, w.kind, w.cap, w.name)
	}
	res, err := bounded.Call(ctx, d.cfg.CallTimeout, &d.calls, nil, func(ctx context.Context) (any, error) {
		return dollarReserveScript.Run(ctx, d.client, nil, args...).Result()
	})
	if err != nil && isCorrupt(err) {
		return dispatch.DollarReservation{}, fmt.Errorf("%w: %w: reserve dollars: %w", dispatch.ErrBudgetUnavailable, dispatch.ErrBudgetCorrupt, err)
	}
	d.health.observe(err)
	if err != nil {
		return dispatch.DollarReservation{}, fmt.Errorf("%w: reserve dollars: %w", dispatch.ErrBudgetUnavailable, err)
	}
	granted, refused, keys, used, err := parseDollarReply(res, len(windows))
	if err != nil {
		return dispatch.DollarReservation{}, fmt.Errorf("%w: reserve dollars: %w", dispatch.ErrBudgetUnavailable, err)
	}
	if !granted {
		w := windows[refused]
		return dispatch.DollarReservation{Window: w.name, UsedMicros: used[refused], CapMicros: w.cap}, nil
	}
	t.keys = keys
	for _, w := range windows {
		t.kinds = append(t.kinds, w.kind)
	}
	return dispatch.DollarReservation{Granted: true, Window: windows[0].name, UsedMicros: used[0], CapMicros: windows[0].cap, Ticket: t}, nil
}

// dollarMember names a reservation in its windows: the job, for an operator
// reading the keys, and a token that makes it unique.
func dollarMember(jobID, token string) string {
	if len(jobID) > maxDollarJobID {
		jobID = jobID[:maxDollarJobID]
	}
	return jobID + "#" + token
}

// parseDollarReply reads {granted, refusing window, {keys}, {used}}: on a
// refusal the lists stop at the refusing window.
func parseDollarReply(res any, n int) (granted bool, refused int, keys []string, used []int64, err error) {
	bad := fmt.Errorf("unexpected reply %v", res)
	arr, ok := res.([]any)
	if !ok || len(arr) != 4 {
		return false, 0, nil, nil, bad
	}
	g, ok1 := arr[0].(int64)
	r, ok2 := arr[1].(int64)
	ks, ok3 := arr[2].([]any)
	us, ok4 := arr[3].([]any)
	if !ok1 || !ok2 || !ok3 || !ok4 || r < 0 || r > int64(n) || (g == 1) != (r == 0) || len(ks) != len(us) {
		return false, 0, nil, nil, bad
	}
	if (g == 1 && len(ks) != n) || (g == 0 && int64(len(ks)) != r) {
		return false, 0, nil, nil, bad
	}
	for i := range ks {
		k, ok := ks[i].(string)
		u, ok2 := us[i].(int64)
		if !ok || !ok2 {
			return false, 0, nil, nil, bad
		}
		keys = append(keys, k)
		used = append(used, u)
	}
	return g == 1, int(r) - 1, keys, used, nil
}

// SettleDollars replaces the reservation by spentMicros in the windows it was
// held in (the windows of the time it was made, even when settled after they
// ended), once: a second call, on r or any copy of it, does nothing, and so
// does a retry after an error that reached the server (a guard key). A
// reservation that lapsed still adds its spend: money spent is counted.
// Settling a refusal or the zero reservation does nothing. An error wraps
// dispatch.ErrBudgetUnavailable; the caller may retry.
func (d *Dollars) SettleDollars(ctx context.Context, r dispatch.DollarReservation, spentMicros int64) error {
	t, _ := r.Ticket.(*dollarTicket)
	if !r.Granted || t == nil || len(t.keys) == 0 {
		return nil
	}
	if spentMicros < 0 {
		return fmt.Errorf("dollars: cannot settle %d micro-dollars", spentMicros)
	}
	t.settled.mu.Lock()
	defer t.settled.mu.Unlock()
	if t.settled.done {
		return nil
	}
	keys := append([]string{dollarSettleKey(t.token)}, t.keys...)
	args := []any{spentMicros, t.member, dollarResSuffix, dollarAmtSuffix, dollarSettleTTL.Milliseconds()}
	for _, k := range t.kinds {
		args = append(args, keyTTL(k).Milliseconds())
	}
	_, err := bounded.Call(ctx, d.cfg.CallTimeout, &d.calls, nil, func(ctx context.Context) (any, error) {
		return dollarSettleScript.Run(ctx, d.client, keys, args...).Result()
	})
	d.health.observe(err)
	if err != nil {
		return fmt.Errorf("%w: settle dollars: %w", dispatch.ErrBudgetUnavailable, err)
	}
	t.settled.done = true
	return nil
}

// DollarWindow is one global dollar window as status, metrics and the
// dashboard show it.
type DollarWindow struct {
	// Name is dispatch.WindowDay, WindowWeek or WindowMonth.
	Name string
	// SpentMicros is the window's settled spend; ReservedMicros its live
	// reservations (jobs running now); CapMicros its cap.
	SpentMicros, ReservedMicros, CapMicros int64
	// ResetsAt is when the window ends, on the server's clock.
	ResetsAt time.Time
}

// Windows returns the active global dollar windows, narrowest first, on the
// server's clock. It changes nothing.
func (d *Dollars) Windows(ctx context.Context) ([]DollarWindow, error) {
	return d.readWindows(ctx, "")
}

func (d *Dollars) readWindows(ctx context.Context, nowMs string) ([]DollarWindow, error) {
	windows := d.windows("", nil)
	if len(windows) == 0 {
		return nil, nil
	}
	args := []any{nowMs, dollarResSuffix, dollarAmtSuffix}
	for _, w := range windows {
		args = append(args, w.prefix, w.kind)
	}
	res, err := bounded.Call(ctx, d.cfg.CallTimeout, &d.calls, nil, func(ctx context.Context) (any, error) {
		return dollarReadScript.Run(ctx, d.client, nil, args...).Result()
	})
	d.health.observe(err)
	if err != nil {
		return nil, fmt.Errorf("%w: read dollars: %w", dispatch.ErrBudgetUnavailable, err)
	}
	now, settled, held, ok := parseDollarRead(res, len(windows))
	if !ok {
		return nil, fmt.Errorf("%w: read dollars: unexpected reply %v", dispatch.ErrBudgetUnavailable, res)
	}
	out := make([]DollarWindow, len(windows))
	for i, w := range windows {
		out[i] = DollarWindow{Name: w.name, SpentMicros: settled[i], ReservedMicros: held[i], CapMicros: w.cap, ResetsAt: windowEnd(w.kind, now)}
	}
	return out, nil
}

// parseDollarRead reads {now ms, {settled}, {held}}.
func parseDollarRead(res any, n int) (now time.Time, settled, held []int64, ok bool) {
	arr, _ := res.([]any)
	if len(arr) != 3 {
		return now, nil, nil, false
	}
	msText, _ := arr[0].(string)
	ms, err := strconv.ParseInt(msText, 10, 64)
	s, ok1 := arr[1].([]any)
	h, ok2 := arr[2].([]any)
	if err != nil || !ok1 || !ok2 || len(s) != n || len(h) != n {
		return now, nil, nil, false
	}
	for i := range n {
		a, ok1 := s[i].(int64)
		b, ok2 := h[i].(int64)
		if !ok1 || !ok2 {
			return now, nil, nil, false
		}
		settled, held = append(settled, a), append(held, b)
	}
	return time.UnixMilli(ms).UTC(), settled, held, true
}

// windowEnd is the end of the window of kind holding t.
func windowEnd(kind string, t time.Time) time.Time {
	switch kind {
	case "w":
		return WeekEnd(t)
	case "m":
		return MonthEnd(t)
	}
	return DayEnd(t)
}

// Close waits, until ctx ends, for Valkey calls that overran CallTimeout. It
// does not close the client.
func (d *Dollars) Close(ctx context.Context) error { return d.calls.Wait(ctx) }
