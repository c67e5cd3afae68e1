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
	budgetReleaseTTL = budgetWeekTTL + 24*time.Hour // outlives every key it guards
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

// Budget holds the fleet's spend caps: counters of container starts per UTC day
// and ISO week, globally and per scope, shared on Valkey by every host.
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
	log := cfg.Logger
	if cfg.Host != "" {
		log = log.With("host", cfg.Host)
	}
	health := budgetHealth{reach.New(log, reach.Events{
		Down: "budget_unreachable", DownLevel: slog.LevelWarn, ErrKey: "reason",
		Up: "budget_restored",
	})}
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
	kind   string // "d" or "w"
	cap    int
}

// Reserve counts one container start of scope in every active window: the
// global day, the global week when WeeklyCap is set, and the scope's own day and
// week when scopeLimit sets them (nil: the scope has no limits). It is one
// script call on the server's clock. A refusal is a Reservation with Granted
// false and a nil error; the start was counted nowhere.
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
	var windows []budgetWindow
	if scopeLimit != nil && scopeLimit.Day != 0 {
		windows = append(windows, budgetWindow{dispatch.WindowScopeDay, budgetScopeDayPrefix(scope), "d", scopeLimit.Day})
	}
	if scopeLimit != nil && scopeLimit.Week != 0 {
		windows = append(windows, budgetWindow{dispatch.WindowScopeWeek, budgetScopeWeekPrefix(scope), "w", scopeLimit.Week})
	}
	windows = append(windows, budgetWindow{dispatch.WindowDay, budgetDayPrefix, "d", b.cfg.DailyCap})
	if b.cfg.WeeklyCap != 0 {
		windows = append(windows, budgetWindow{dispatch.WindowWeek, budgetWeekPrefix, "w", b.cfg.WeeklyCap})
	}
	args := []any{nowMs, budgetDayTTL.Milliseconds(), budgetWeekTTL.Milliseconds()}
	for _, w := range windows {
		args = append(args, w.prefix, w.kind, w.cap, w.name)
	}

	res, err := bounded.Call(ctx, b.cfg.CallTimeout, &b.calls, nil, func(ctx context.Context) (any, error) {
		return reserveScript.Run(ctx, b.client, nil, args...).Result()
	})
	b.health.observe(err)
	if err != nil {
		return dispatch.Reservation{}, fmt.Errorf("%w: reserve: %w", dispatch.ErrBudgetUnavailable, err)
	}
	granted, refused, keys, counts, err := parseReserveReply(res, len(windows))
	if err != nil {
		return dispatch.Reservation{}, fmt.Errorf("%w: reserve: %w", dispatch.ErrBudgetUnavailable, err)
	}
	if !granted {
		w := windows[refused]
		return dispatch.Reservation{Window: w.name, Count: counts[refused], Cap: w.cap}, nil
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

// parseReserveReply reads {granted, refusing window, {keys}, {counts}}.
func parseReserveReply(res any, n int) (granted bool, refused int, keys []string, counts []int, err error) {
	bad := func() (bool, int, []string, []int, error) {
		return false, 0, nil, nil, fmt.Errorf("unexpected reply %v", res)
	}
	arr, ok := res.([]any)
	if !ok || len(arr) != 4 {
		return bad()
	}
	g, ok1 := arr[0].(int64)
	r, ok2 := arr[1].(int64)
	ks, ok3 := arr[2].([]any)
	cs, ok4 := arr[3].([]any)
	if !ok1 || !ok2 || !ok3 || !ok4 || len(ks) != n || len(cs) != n || r < 0 || r > int64(n) || (g == 1) != (r == 0) {
		return bad()
	}
	for i := range n {
		k, ok := ks[i].(string)
		c, ok2 := cs[i].(int64)
		if !ok || !ok2 {
			return bad()
		}
		keys = append(keys, k)
		counts = append(counts, int(c))
	}
	return g == 1, int(r) - 1, keys, counts, nil
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

// budgetCounts is the counts script's answer.
type budgetCounts struct {
	dayKey, weekKey string
	day, week       int
}

// counts is Counts with the script's clock override (see reserve).
func (b *Budget) counts(ctx context.Context, nowMs string) (budgetCounts, error) {
	res, err := bounded.Call(ctx, b.cfg.CallTimeout, &b.calls, nil, func(ctx context.Context) (any, error) {
		return countsScript.Run(ctx, b.client, nil, nowMs, budgetDayPrefix, budgetWeekPrefix).Result()
	})
	b.health.observe(err)
	if err != nil {
		return budgetCounts{}, fmt.Errorf("%w: counts: %w", dispatch.ErrBudgetUnavailable, err)
	}
	arr, ok := res.([]any)
	if !ok || len(arr) != 4 {
		return budgetCounts{}, fmt.Errorf("%w: counts: unexpected reply %v", dispatch.ErrBudgetUnavailable, res)
	}
	var out budgetCounts
	var day, monday, d, w string
	for i, dst := range []*string{&day, &monday, &d, &w} {
		s, ok := arr[i].(string)
		if !ok {
			return budgetCounts{}, fmt.Errorf("%w: counts: unexpected reply %v", dispatch.ErrBudgetUnavailable, res)
		}
		*dst = s
	}
	out.dayKey, out.weekKey = budgetDayPrefix+day, budgetWeekPrefix+monday
	for _, f := range []struct {
		key, raw string
		dst      *int
	}{{out.dayKey, d, &out.day}, {out.weekKey, w, &out.week}} {
		if f.raw == "" {
			continue
		}
		n, err := strconv.Atoi(f.raw)
		if err != nil {
			return budgetCounts{}, fmt.Errorf("%w: counts: %s holds %s, not a count", dispatch.ErrBudgetUnavailable, f.key, check.Quote(f.raw))
		}
		*f.dst = n
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
