package fleetstate

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/internal/bounded"
	"github.com/pidispatch/pidispatch/internal/check"
	"github.com/pidispatch/pidispatch/internal/reach"
	"github.com/redis/go-redis/v9"
)

// DefaultBudgetCallTimeout bounds each Valkey call of a Budget.
const DefaultBudgetCallTimeout = 2 * time.Second

// Lifetimes of the budget keys: a window's key outlives its window by a margin,
// so a reservation made just before midnight can still be released after it.
const (
	budgetDayTTL     = 2 * 24 * time.Hour
	budgetWeekTTL    = 9 * 24 * time.Hour
	budgetMonthTTL   = 40 * 24 * time.Hour
	budgetReleaseTTL = budgetMonthTTL + 24*time.Hour // outlives every key it guards
)

// BudgetConfig tunes a Budget. The zero value is valid; NewBudget applies the
// defaults to a copy.
type BudgetConfig struct {
	// DailyCap bounds container starts per UTC day, fleet-wide. 0 means
	// DefaultDailyCap (25). A negative cap refuses every reservation (fails
	// closed), as the original treats a cap of 0 or less.
	DailyCap int
	// WeeklyCap bounds container starts per ISO week (from Monday, UTC),
	// fleet-wide. 0 disables the window; a negative cap refuses everything.
	WeeklyCap int
	// MonthlyCap bounds container starts per UTC month, fleet-wide. 0
	// disables the window; a negative cap refuses everything.
	MonthlyCap int
	// SoftHoldPct, when 1..99, refuses a start (soft-hold) that would take any
	// count window, global or a scope's, past floor(cap*SoftHoldPct/100)
	// starts, before the hard cap is reached. 0 disables the soft hold.
	SoftHoldPct int
	// CallTimeout bounds every Valkey call. Defaults to 2s.
	CallTimeout time.Duration
	// Logger receives the budget's reachability transitions
	// (budget_unreachable, budget_restored), once each. Defaults to discarding.
	Logger *slog.Logger
	// Host is this worker's name, the host attribute of every log line.
	Host string
}

func (c BudgetConfig) withDefaults() BudgetConfig {
	c.DailyCap = cmp.Or(c.DailyCap, dispatch.DefaultDailyCap)
	if c.CallTimeout <= 0 {
		c.CallTimeout = DefaultBudgetCallTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Budget holds the fleet's spend caps: counters of container starts per UTC day,
// ISO week and UTC month, globally and per scope, shared on Valkey by every host.
//
// A reservation is one script call that counts the start in every active window
// or in none. Unlike the original, a refusal consumes nothing: the original
// INCRed unconditionally and never gave a refused slot back, so its counters
// drifted above the starts that happened. Here the counters equal the containers
// started (less those released because they never started), which is the number
// an operator reads in status and doctor.
//
// A Budget is safe for concurrent use. It does not own the client.
type Budget struct {
	client redis.UniversalClient
	cfg    BudgetConfig
	health budgetHealth
	calls  bounded.Calls // Valkey calls, including ones that overran their bound
}

var _ dispatch.Budgeter = (*Budget)(nil)

// NewBudget returns a Budget over client.
func NewBudget(client redis.UniversalClient, cfg BudgetConfig) *Budget {
	cfg = cfg.withDefaults()
	health := storeHealth(cfg.Logger, cfg.Host, "budget")
	return &Budget{client: client, cfg: cfg, health: health}
}

// ticket is a granted reservation's handle for Release.
type ticket struct {
	keys     []string       // the windows this reservation incremented
	token    string         // names its release guard
	released *releaseRecord // shared by copies, so any copy releases once
}

type releaseRecord struct {
	mu   sync.Mutex
	done bool
}

// budgetWindow is one window as the reserve script receives it.
type budgetWindow struct {
	name   string
	prefix string
	kind   string // "d", "w" or "m"
	cap    int
}

// soft is the window's soft hold as the reserve script reads it: "" for none,
// else the most starts the window may reach before the hold refuses.
func (w budgetWindow) soft(pct int) string {
	if pct <= 0 || pct >= 100 || w.cap <= 0 {
		return ""
	}
	return strconv.Itoa(w.cap * pct / 100)
}

// windows lists the active windows of a reservation of scope, narrowest first:
// the scope's day, week and month, then the global day, week and month.
func (b *Budget) windows(scope string, l *dispatch.ScopeLimit) []budgetWindow {
	var ws []budgetWindow
	if l != nil {
		for _, w := range []budgetWindow{
			{dispatch.WindowScopeDay, budgetScopeDayPrefix(scope), "d", l.Day},
			{dispatch.WindowScopeWeek, budgetScopeWeekPrefix(scope), "w", l.Week},
			{dispatch.WindowScopeMonth, budgetScopeMonthPrefix(scope), "m", l.Month},
		} {
			if w.cap != 0 {
				ws = append(ws, w)
			}
		}
	}
	ws = append(ws, budgetWindow{dispatch.WindowDay, budgetDayPrefix, "d", b.cfg.DailyCap})
	if b.cfg.WeeklyCap != 0 {
		ws = append(ws, budgetWindow{dispatch.WindowWeek, budgetWeekPrefix, "w", b.cfg.WeeklyCap})
	}
	if b.cfg.MonthlyCap != 0 {
		ws = append(ws, budgetWindow{dispatch.WindowMonth, budgetMonthPrefix, "m", b.cfg.MonthlyCap})
	}
	return ws
}

// Reserve counts one container start of scope in every active window: the
// global day, the global week and month when WeeklyCap and MonthlyCap are set,
// and the scope's own day, week and month when scopeLimit sets them (nil: the
// scope has no limits). It is one script call on the server's clock. A refusal
// is a Reservation with Granted false and a nil error (Soft when the soft hold
// refused); the start was counted nowhere.
//
// An error wraps ErrBudgetUnavailable: nothing is known to be counted and the
// job must not start (fail closed). A call abandoned at CallTimeout may still
// be applied by the server, which then counts one start that did not happen:
// the safe direction for money.
func (b *Budget) Reserve(ctx context.Context, scope string, scopeLimit *dispatch.ScopeLimit) (dispatch.Reservation, error) {
	return b.reserve(ctx, scope, scopeLimit, "")
}

// reserve is Reserve with the script's clock override: production passes "",
// tests an epoch millisecond (see budgetDatesLua).
func (b *Budget) reserve(ctx context.Context, scope string, scopeLimit *dispatch.ScopeLimit, nowMs string) (dispatch.Reservation, error) {
	if scopeLimit != nil && scopeLimit.Scope != scope {
		return dispatch.Reservation{}, fmt.Errorf("budget: the limits of scope %s were given for scope %s", check.Quote(scopeLimit.Scope), check.Quote(scope))
	}
	windows := b.windows(scope, scopeLimit)
	args := []any{nowMs, budgetDayTTL.Milliseconds(), budgetWeekTTL.Milliseconds(), budgetMonthTTL.Milliseconds(), maxSaneCount}
	for _, w := range windows {
		args = append(args, w.prefix, w.kind, w.cap, w.name, w.soft(b.cfg.SoftHoldPct))
	}

	res, err := bounded.Call(ctx, b.cfg.CallTimeout, &b.calls, nil, func(ctx context.Context) (any, error) {
		return reserveScript.Run(ctx, b.client, nil, args...).Result()
	})
	if err != nil && isCorrupt(err) {
		return dispatch.Reservation{}, fmt.Errorf("%w: %w: reserve: %w", dispatch.ErrBudgetUnavailable, dispatch.ErrBudgetCorrupt, err)
	}
	b.health.observe(err)
	if err != nil {
		return dispatch.Reservation{}, fmt.Errorf("%w: reserve: %w", dispatch.ErrBudgetUnavailable, err)
	}
	reply, err := parseReserveReply(res, len(windows))
	if err != nil {
		return dispatch.Reservation{}, fmt.Errorf("%w: reserve: %w", dispatch.ErrBudgetUnavailable, err)
	}
	keys, counts := reply.keys, reply.counts
	if !reply.granted {
		w := windows[reply.refused]
		return dispatch.Reservation{Window: w.name, Count: counts[reply.refused], Cap: w.cap, Soft: reply.soft}, nil
	}
	day := slices.IndexFunc(windows, func(w budgetWindow) bool { return w.name == dispatch.WindowDay })
	return dispatch.Reservation{
		Granted: true,
		Window:  dispatch.WindowDay,
		Count:   counts[day],
		Cap:     b.cfg.DailyCap,
		Ticket:  &ticket{keys: keys, token: newReleaseToken(), released: &releaseRecord{}},
	}, nil
}

// The largest values a budget counter and a dollar window may hold. A
// count past ten times the largest cap, or a spend past a thousand times the
// largest dollar cap, is no count a fleet made: the window is corrupt.
const (
	maxSaneCount     = 10 * dispatch.MaxCap
	maxSaneMicros    = int64(1000 * dispatch.MaxUSD * 1_000_000)
	maxSaneMicrosLua = "1000000000000000" // maxSaneMicros, in the dollar scripts
	corruptReply     = "BUDGETCORRUPT"    // the reply of a script that found a corrupt window
)

// isCorrupt reports whether err is a script's report of a corrupt window.
func isCorrupt(err error) bool {
	var rerr redis.Error
	return errors.As(err, &rerr) && strings.HasPrefix(rerr.Error(), corruptReply)
}

// reserveReply is the reserve script's answer.
type reserveReply struct {
	granted, soft bool
	refused       int // index of the refusing window
	keys          []string
	counts        []int
}

// parseReserveReply reads {granted, refusing window, {keys}, {counts}, soft}.
func parseReserveReply(res any, n int) (reserveReply, error) {
	bad := fmt.Errorf("unexpected reply %v", res)
	arr, ok := res.([]any)
	if !ok || len(arr) != 5 {
		return reserveReply{}, bad
	}
	g, ok1 := arr[0].(int64)
	r, ok2 := arr[1].(int64)
	ks, ok3 := arr[2].([]any)
	cs, ok4 := arr[3].([]any)
	soft, ok5 := arr[4].(int64)
	if !ok1 || !ok2 || !ok3 || !ok4 || !ok5 || len(ks) != n || len(cs) != n || r < 0 || r > int64(n) || (g == 1) != (r == 0) {
		return reserveReply{}, bad
	}
	out := reserveReply{granted: g == 1, soft: soft == 1 && g == 0, refused: int(r) - 1}
	for i := range n {
		k, ok := ks[i].(string)
		c, ok2 := cs[i].(int64)
		if !ok || !ok2 {
			return reserveReply{}, bad
		}
		out.keys = append(out.keys, k)
		out.counts = append(out.counts, int(c))
	}
	return out, nil
}

// newReleaseToken names a reservation's release guard: 128 random bits.
func newReleaseToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b[:])
}

// Release gives back the windows a granted reservation counted. It is meant only
// for a container that never started (the worker's never-started path): a start
// that ran, however briefly, was spent.
//
// It is idempotent per reservation: a second call, on this Reservation or any
// copy of it, does nothing, and so does a retry after an error that reached the
// server anyway (the script sets a per-reservation guard key). Releasing a
// refusal or the zero Reservation does nothing. An error wraps
// ErrBudgetUnavailable; the caller may retry.
func (b *Budget) Release(ctx context.Context, r dispatch.Reservation) error {
	t, _ := r.Ticket.(*ticket)
	if !r.Granted || t == nil || len(t.keys) == 0 {
		return nil
	}
	t.released.mu.Lock()
	defer t.released.mu.Unlock()
	if t.released.done {
		return nil
	}
	keys := append([]string{budgetReleaseKey(t.token)}, t.keys...)
	_, err := bounded.Call(ctx, b.cfg.CallTimeout, &b.calls, nil, func(ctx context.Context) (any, error) {
		return releaseScript.Run(ctx, b.client, keys, budgetReleaseTTL.Milliseconds()).Result()
	})
	b.health.observe(err)
	if err != nil {
		return fmt.Errorf("%w: release: %w", dispatch.ErrBudgetUnavailable, err)
	}
	t.released.done = true
	return nil
}

// Counts returns today's global counts of container starts: the UTC day's and
// the ISO week's, on the server's clock (the week's is 0 when no weekly cap has
// ever counted). For status and doctor.
func (b *Budget) Counts(ctx context.Context) (day, week int, err error) {
	c, err := b.counts(ctx, "")
	return c.day, c.week, err
}

// CountWindow is one global count window as status, metrics and the dashboard
// show it.
type CountWindow struct {
	// Name is dispatch.WindowDay, WindowWeek or WindowMonth.
	Name string
	// Count is the starts counted in the window so far; Cap is its cap.
	Count, Cap int
	// ResetsAt is when the window ends (UTC midnight, Monday, the 1st), on
	// the server's clock.
	ResetsAt time.Time
}

// Windows returns the active global count windows (the day always, the week
// and month when their caps are set), on the server's clock.
func (b *Budget) Windows(ctx context.Context) ([]CountWindow, error) {
	c, err := b.counts(ctx, "")
	if err != nil {
		return nil, err
	}
	out := []CountWindow{{dispatch.WindowDay, c.day, b.cfg.DailyCap, DayEnd(c.now)}}
	if b.cfg.WeeklyCap != 0 {
		out = append(out, CountWindow{dispatch.WindowWeek, c.week, b.cfg.WeeklyCap, WeekEnd(c.now)})
	}
	if b.cfg.MonthlyCap != 0 {
		out = append(out, CountWindow{dispatch.WindowMonth, c.month, b.cfg.MonthlyCap, MonthEnd(c.now)})
	}
	return out, nil
}

// DayEnd, WeekEnd and MonthEnd are the ends of the UTC windows holding t:
// the next midnight, the next Monday 00:00 and the next 1st 00:00, when a
// count or dollar window of t resets.
func DayEnd(t time.Time) time.Time {
	y, m, d := t.UTC().Date()
	return time.Date(y, m, d+1, 0, 0, 0, 0, time.UTC)
}

func WeekEnd(t time.Time) time.Time {
	u := t.UTC()
	back := (int(u.Weekday()) + 6) % 7
	y, m, d := u.Date()
	return time.Date(y, m, d-back+7, 0, 0, 0, 0, time.UTC)
}

func MonthEnd(t time.Time) time.Time {
	y, m, _ := t.UTC().Date()
	return time.Date(y, m+1, 1, 0, 0, 0, 0, time.UTC)
}

// budgetCounts is the counts script's answer.
type budgetCounts struct {
	now                       time.Time
	dayKey, weekKey, monthKey string
	day, week, month          int
}

// counts is Counts with the script's clock override (see reserve).
func (b *Budget) counts(ctx context.Context, nowMs string) (budgetCounts, error) {
	res, err := bounded.Call(ctx, b.cfg.CallTimeout, &b.calls, nil, func(ctx context.Context) (any, error) {
		return countsScript.Run(ctx, b.client, nil, nowMs, budgetDayPrefix, budgetWeekPrefix, budgetMonthPrefix).Result()
	})
	b.health.observe(err)
	if err != nil {
		return budgetCounts{}, fmt.Errorf("%w: counts: %w", dispatch.ErrBudgetUnavailable, err)
	}
	arr, ok := res.([]any)
	if !ok || len(arr) != 7 {
		return budgetCounts{}, fmt.Errorf("%w: counts: unexpected reply %v", dispatch.ErrBudgetUnavailable, res)
	}
	var f [7]string
	for i := range f {
		s, ok := arr[i].(string)
		if !ok {
			return budgetCounts{}, fmt.Errorf("%w: counts: unexpected reply %v", dispatch.ErrBudgetUnavailable, res)
		}
		f[i] = s
	}
	ms, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil {
		return budgetCounts{}, fmt.Errorf("%w: counts: unexpected reply %v", dispatch.ErrBudgetUnavailable, res)
	}
	out := budgetCounts{now: time.UnixMilli(ms).UTC(), dayKey: budgetDayPrefix + f[1], weekKey: budgetWeekPrefix + f[2], monthKey: budgetMonthPrefix + f[3]}
	for _, c := range []struct {
		key, raw string
		dst      *int
	}{{out.dayKey, f[4], &out.day}, {out.weekKey, f[5], &out.week}, {out.monthKey, f[6], &out.month}} {
		if c.raw == "" {
			continue
		}
		n, err := strconv.Atoi(c.raw)
		if err != nil {
			return budgetCounts{}, fmt.Errorf("%w: counts: %s holds %s, not a count", dispatch.ErrBudgetUnavailable, c.key, check.Quote(c.raw))
		}
		*c.dst = n
	}
	return out, nil
}

// Close waits, until ctx ends, for Valkey calls that overran CallTimeout and
// still run in the background, so none outlives the Budget's owner. It does not
// close the client. The Budget stays usable.
func (b *Budget) Close(ctx context.Context) error {
	return b.calls.Wait(ctx)
}

// budgetHealth logs reachability transitions, once each, never per call.
type budgetHealth struct{ t *reach.Tracker }

// storeHealth logs a store's reachability once per transition, as
// <name>_unreachable and <name>_restored, stamped with host (a nil logger
// discards).
func storeHealth(logger *slog.Logger, host, name string) budgetHealth {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if host != "" {
		logger = logger.With("host", host)
	}
	return budgetHealth{reach.New(logger, reach.Events{
		Down: name + "_unreachable", DownLevel: slog.LevelWarn, ErrKey: "reason",
		Up: name + "_restored",
	})}
}

func (h *budgetHealth) observe(err error) {
	// A server error reply (a junk counter) is not an outage; only transport
	// failures and timeouts flip the state.
	// Nor is a caller that gave up.
	var rerr redis.Error
	if err != nil && (errors.As(err, &rerr) || errors.Is(err, context.Canceled)) {
		return
	}
	h.t.Observe(err)
}
