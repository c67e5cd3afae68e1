package fleetstate

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/internal/testkit/logtest"
	"github.com/pidispatch/pidispatch/jobs"
)

// budgetAt is an instant the tests pin the reserve script's clock to, so they
// know the keys' names whatever the wall clock says.
var budgetAt = time.Date(2026, 6, 3, 12, 0, 0, 0, time.UTC) // a Wednesday

func budgetMs(t time.Time) string { return strconv.FormatInt(t.UnixMilli(), 10) }

func budgetGet(t *testing.T, c *redis.Client, key string) int {
	t.Helper()
	v, err := c.Get(context.Background(), key).Int()
	if errors.Is(err, redis.Nil) {
		return 0
	}
	require.NoError(t, err)
	return v
}

func TestBudgetDailyCapRefusalConsumesNothing(t *testing.T) {
	t.Parallel()
	db := livetest.Valkey(t)
	ctx := context.Background()
	b := NewBudget(db.Client, BudgetConfig{DailyCap: 2})

	for i := 1; i <= 2; i++ {
		r, err := b.Reserve(ctx, "", nil)
		require.NoError(t, err)
		require.True(t, r.Granted)
		require.Equal(t, dispatch.Reservation{Granted: true, Window: dispatch.WindowDay, Count: i, Cap: 2}, dispatch.Reservation{Granted: r.Granted, Window: r.Window, Count: r.Count, Cap: r.Cap})
		require.Empty(t, r.Reason())
	}
	for range 3 {
		r, err := b.Reserve(ctx, "", nil)
		require.NoError(t, err)
		require.False(t, r.Granted)
		require.Equal(t, dispatch.WindowDay, r.Window)
		require.Equal(t, 2, r.Count)
		require.Equal(t, 2, r.Cap)
		require.Equal(t, jobs.ReasonOverBudget, r.Reason())
	}
	day, week, err := b.Counts(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, day, "three refusals consumed nothing")
	require.Equal(t, 0, week, "no weekly cap: the week is not counted")
}

func TestBudgetWeeklyCapRefuses(t *testing.T) {
	t.Parallel()
	db := livetest.Valkey(t)
	ctx := context.Background()
	b := NewBudget(db.Client, BudgetConfig{DailyCap: 10, WeeklyCap: 2})

	for range 2 {
		r, err := b.reserve(ctx, "", nil, budgetMs(budgetAt))
		require.NoError(t, err)
		require.True(t, r.Granted)
	}
	r, err := b.reserve(ctx, "", nil, budgetMs(budgetAt))
	require.NoError(t, err)
	require.False(t, r.Granted)
	require.Equal(t, dispatch.WindowWeek, r.Window)
	require.Equal(t, 2, r.Cap)
	require.Equal(t, jobs.ReasonOverBudget, r.Reason())

	// The next day is a new day but the same week: still refused by the week.
	r, err = b.reserve(ctx, "", nil, budgetMs(budgetAt.AddDate(0, 0, 1)))
	require.NoError(t, err)
	require.False(t, r.Granted)
	require.Equal(t, dispatch.WindowWeek, r.Window)

	require.Equal(t, 2, budgetGet(t, db.Client, BudgetDayKey(budgetAt)))
	require.Equal(t, 0, budgetGet(t, db.Client, BudgetDayKey(budgetAt.AddDate(0, 0, 1))))
	require.Equal(t, 2, budgetGet(t, db.Client, BudgetWeekKey(budgetAt)))
	c, err := b.counts(ctx, budgetMs(budgetAt))
	require.NoError(t, err)
	require.Equal(t, budgetCounts{now: budgetAt, dayKey: BudgetDayKey(budgetAt), weekKey: BudgetWeekKey(budgetAt), monthKey: BudgetMonthKey(budgetAt), day: 2, week: 2}, c)
}

func TestBudgetScopeWindows(t *testing.T) {
	t.Parallel()
	const scope = "owner/web"
	tests := []struct {
		name       string
		cfg        BudgetConfig
		limit      dispatch.ScopeLimit
		wantWindow string
	}{
		// Every window is full at the second start: the narrowest names it.
		{"ScopeDayBeforeAll", BudgetConfig{DailyCap: 1, WeeklyCap: 1}, dispatch.ScopeLimit{Scope: scope, Day: 1, Week: 1}, dispatch.WindowScopeDay},
		{"ScopeWeekBeforeGlobal", BudgetConfig{DailyCap: 1, WeeklyCap: 1}, dispatch.ScopeLimit{Scope: scope, Week: 1}, dispatch.WindowScopeWeek},
		{"ScopeDayAlone", BudgetConfig{DailyCap: 10}, dispatch.ScopeLimit{Scope: scope, Day: 1}, dispatch.WindowScopeDay},
		{"GlobalDayBeforeWeek", BudgetConfig{DailyCap: 1, WeeklyCap: 1}, dispatch.ScopeLimit{Scope: scope, Day: 5, Week: 5}, dispatch.WindowDay},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			db := livetest.Valkey(t)
			ctx := context.Background()
			b := NewBudget(db.Client, tt.cfg)
			now := budgetMs(budgetAt)

			r, err := b.reserve(ctx, scope, &tt.limit, now)
			require.NoError(t, err)
			require.True(t, r.Granted)
			r, err = b.reserve(ctx, scope, &tt.limit, now)
			require.NoError(t, err)
			require.False(t, r.Granted)
			require.Equal(t, tt.wantWindow, r.Window)
			require.Equal(t, 1, r.Count)
			wantReason := jobs.ReasonOverBudget
			if strings.HasPrefix(tt.wantWindow, "scope-") {
				wantReason = jobs.ReasonScopeCap
			}
			require.Equal(t, wantReason, r.Reason())

			// Nothing of the refusal stayed in any window.
			require.Equal(t, 1, budgetGet(t, db.Client, BudgetDayKey(budgetAt)))
			if tt.cfg.WeeklyCap != 0 {
				require.Equal(t, 1, budgetGet(t, db.Client, BudgetWeekKey(budgetAt)))
			}
			if tt.limit.Day != 0 {
				require.Equal(t, 1, budgetGet(t, db.Client, BudgetScopeDayKey(scope, budgetAt)))
			}
			if tt.limit.Week != 0 {
				require.Equal(t, 1, budgetGet(t, db.Client, BudgetScopeWeekKey(scope, budgetAt)))
			}
		})
	}
}

func TestBudgetScopeLimitOfAnotherScopeIsAnError(t *testing.T) {
	t.Parallel()
	db := livetest.Valkey(t)
	b := NewBudget(db.Client, BudgetConfig{})
	_, err := b.Reserve(context.Background(), "owner/a", &dispatch.ScopeLimit{Scope: "owner/b", Day: 1})
	require.Error(t, err)
	n, err := db.Client.DBSize(context.Background()).Result()
	require.NoError(t, err)
	require.Zero(t, n, "nothing counted")
}

func TestBudgetNegativeCapFailsClosed(t *testing.T) {
	t.Parallel()
	db := livetest.Valkey(t)
	ctx := context.Background()
	b := NewBudget(db.Client, BudgetConfig{DailyCap: -1})
	r, err := b.reserve(ctx, "", nil, budgetMs(budgetAt))
	require.NoError(t, err)
	require.False(t, r.Granted)
	require.Equal(t, dispatch.WindowDay, r.Window)
	require.Equal(t, 0, budgetGet(t, db.Client, BudgetDayKey(budgetAt)))

	// The zero config is the documented default cap, not "no starts".
	require.Equal(t, dispatch.DefaultDailyCap, NewBudget(db.Client, BudgetConfig{}).cfg.DailyCap)
}

func TestBudgetReleaseFreesTheSlot(t *testing.T) {
	t.Parallel()
	db := livetest.Valkey(t)
	ctx := context.Background()
	b := NewBudget(db.Client, BudgetConfig{DailyCap: 1, WeeklyCap: 5})
	limit := &dispatch.ScopeLimit{Scope: "/srv/a", Day: 3, Week: 3}
	now := budgetMs(budgetAt)

	r1, err := b.reserve(ctx, "/srv/a", limit, now)
	require.NoError(t, err)
	require.True(t, r1.Granted)
	r2, err := b.reserve(ctx, "/srv/a", limit, now)
	require.NoError(t, err)
	require.False(t, r2.Granted)
	require.NoError(t, b.Release(ctx, r2), "releasing a refusal does nothing")
	require.NoError(t, b.Release(ctx, dispatch.Reservation{}), "nor does the zero Reservation")
	require.Equal(t, 1, budgetGet(t, db.Client, BudgetDayKey(budgetAt)))

	// The container never started: every window it counted gets its slot back.
	require.NoError(t, b.Release(ctx, r1))
	for _, k := range []string{BudgetDayKey(budgetAt), BudgetWeekKey(budgetAt), BudgetScopeDayKey("/srv/a", budgetAt), BudgetScopeWeekKey("/srv/a", budgetAt)} {
		require.Equal(t, 0, budgetGet(t, db.Client, k), k)
	}
	r3, err := b.reserve(ctx, "/srv/a", limit, now)
	require.NoError(t, err)
	require.True(t, r3.Granted, "the freed slot is granted again")
}

func TestBudgetDoubleReleaseFreesNothingExtra(t *testing.T) {
	t.Parallel()
	db := livetest.Valkey(t)
	ctx := context.Background()
	b := NewBudget(db.Client, BudgetConfig{DailyCap: 5})
	now := budgetMs(budgetAt)

	r1, err := b.reserve(ctx, "", nil, now)
	require.NoError(t, err)
	_, err = b.reserve(ctx, "", nil, now)
	require.NoError(t, err)
	require.Equal(t, 2, budgetGet(t, db.Client, BudgetDayKey(budgetAt)))

	require.NoError(t, b.Release(ctx, r1))
	require.NoError(t, b.Release(ctx, r1))
	copied := r1
	require.NoError(t, b.Release(ctx, copied), "a copy shares the released state")
	require.Equal(t, 1, budgetGet(t, db.Client, BudgetDayKey(budgetAt)))

	// A release that reached the server but whose answer was lost (a retry, or
	// another Budget holding the same reservation) is stopped by the guard key.
	lost := r1
	lost.Ticket.(*ticket).released = &releaseRecord{}
	require.NoError(t, NewBudget(db.Client, BudgetConfig{}).Release(ctx, lost))
	require.Equal(t, 1, budgetGet(t, db.Client, BudgetDayKey(budgetAt)))
	pttl, err := db.Client.PTTL(ctx, budgetReleaseKey(r1.Ticket.(*ticket).token)).Result()
	require.NoError(t, err)
	require.Greater(t, pttl, budgetWeekTTL, "the guard outlives the windows it guards")
}

func TestBudgetReleaseNeverCreatesANegativeCounter(t *testing.T) {
	t.Parallel()
	db := livetest.Valkey(t)
	ctx := context.Background()
	b := NewBudget(db.Client, BudgetConfig{DailyCap: 5})
	r, err := b.reserve(ctx, "", nil, budgetMs(budgetAt))
	require.NoError(t, err)
	require.NoError(t, db.Client.Del(ctx, BudgetDayKey(budgetAt)).Err()) // expired, or reset by an operator
	require.NoError(t, b.Release(ctx, r))
	n, err := db.Client.Exists(ctx, BudgetDayKey(budgetAt)).Result()
	require.NoError(t, err)
	require.Zero(t, n, "no immortal -1 counter")
}

func TestBudgetTTLsOnNewKeys(t *testing.T) {
	t.Parallel()
	db := livetest.Valkey(t)
	ctx := context.Background()
	b := NewBudget(db.Client, BudgetConfig{DailyCap: 5, WeeklyCap: 5})
	const scope = "owner/ttl"
	// The real clock here: production's path, no override.
	r, err := b.Reserve(ctx, scope, &dispatch.ScopeLimit{Scope: scope, Day: 5, Week: 5})
	require.NoError(t, err)
	require.True(t, r.Granted)
	require.Len(t, r.Ticket.(*ticket).keys, 4)

	for _, k := range r.Ticket.(*ticket).keys {
		pttl, err := db.Client.PTTL(ctx, k).Result()
		require.NoError(t, err)
		limit := budgetDayTTL
		if strings.Contains(k, ":w:") {
			limit = budgetWeekTTL
		}
		require.Greater(t, pttl, limit-time.Minute, k)
		require.LessOrEqual(t, pttl, limit, k)
	}
	// A key someone left without an expiry gets one at the next reservation.
	require.NoError(t, db.Client.Persist(ctx, r.Ticket.(*ticket).keys[0]).Err())
	_, err = b.Reserve(ctx, scope, &dispatch.ScopeLimit{Scope: scope, Day: 5, Week: 5})
	require.NoError(t, err)
	pttl, err := db.Client.PTTL(ctx, r.Ticket.(*ticket).keys[0]).Result()
	require.NoError(t, err)
	require.Greater(t, pttl, time.Duration(0))
}

func TestBudgetConcurrentReservesNeverOverGrant(t *testing.T) {
	t.Parallel()
	db := livetest.Valkey(t)
	ctx := context.Background()
	b := NewBudget(db.Client, BudgetConfig{DailyCap: 10, CallTimeout: 10 * time.Second})
	var granted, refused atomic.Int32
	var wg sync.WaitGroup
	start := make(chan struct{})
	errs := make(chan error, 50)
	for range 50 {
		wg.Go(func() {
			<-start
			r, err := b.reserve(ctx, "", nil, budgetMs(budgetAt))
			if err != nil {
				errs <- err
				return
			}
			if r.Granted {
				granted.Add(1)
			} else {
				refused.Add(1)
			}
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.EqualValues(t, 10, granted.Load())
	require.EqualValues(t, 40, refused.Load())
	require.Equal(t, 10, budgetGet(t, db.Client, BudgetDayKey(budgetAt)))
}

// TestBudgetDateMath drives the script's civil-date arithmetic through instants
// the wall clock will not reach during the test, and holds it to Go's time
// package and to keys.go.
func TestBudgetDateMath(t *testing.T) {
	t.Parallel()
	db := livetest.Valkey(t)
	ctx := context.Background()
	b := NewBudget(db.Client, BudgetConfig{DailyCap: dispatch.MaxCap})
	ms := func(y int, m time.Month, d, h, min, s, milli int) time.Time {
		return time.Date(y, m, d, h, min, s, milli*1e6, time.UTC)
	}
	tests := []struct {
		name        string
		at          time.Time
		day, monday string
		weekday     time.Weekday
	}{
		{"YearEndLastMilli", ms(2026, 12, 31, 23, 59, 59, 999), "2026-12-31", "2026-12-28", time.Thursday},
		{"NewYear", ms(2027, 1, 1, 0, 0, 0, 0), "2027-01-01", "2026-12-28", time.Friday},
		{"LeapDay2028", ms(2028, 2, 29, 12, 0, 0, 0), "2028-02-29", "2028-02-28", time.Tuesday},
		{"AfterLeapDay2028", ms(2028, 3, 1, 0, 0, 0, 0), "2028-03-01", "2028-02-28", time.Wednesday},
		{"SundayLastMilli", ms(2026, 5, 31, 23, 59, 59, 999), "2026-05-31", "2026-05-25", time.Sunday},
		{"FollowingMonday", ms(2026, 6, 1, 0, 0, 0, 0), "2026-06-01", "2026-06-01", time.Monday},
		{"WeekAcrossYears", ms(2027, 1, 3, 23, 0, 0, 0), "2027-01-03", "2026-12-28", time.Sunday},
		{"Epoch", ms(1970, 1, 1, 0, 0, 0, 0), "1970-01-01", "1969-12-29", time.Thursday},
		{"Y2KLeapDay", ms(2000, 2, 29, 1, 2, 3, 4), "2000-02-29", "2000-02-28", time.Tuesday},
		{"CenturyNotLeap", ms(2100, 3, 1, 0, 0, 0, 0), "2100-03-01", "2100-03-01", time.Monday},
		{"LeapDay2400", ms(2400, 2, 29, 0, 0, 0, 0), "2400-02-29", "2400-02-28", time.Tuesday},
	}
	for _, tt := range tests {
		require.Equal(t, tt.weekday, tt.at.Weekday(), "%s: the table's own weekday", tt.name)
		require.Equal(t, "budget:"+tt.day, BudgetDayKey(tt.at), tt.name)
		require.Equal(t, "budget:w:"+tt.monday, BudgetWeekKey(tt.at), tt.name)

		// The reserve script, on this instant, counts exactly these keys.
		const scope = "owner/dates"
		r, err := b.reserve(ctx, scope, &dispatch.ScopeLimit{Scope: scope, Day: dispatch.MaxCap, Week: dispatch.MaxCap}, budgetMs(tt.at))
		require.NoError(t, err, tt.name)
		require.True(t, r.Granted, tt.name)
		require.Equal(t, []string{
			BudgetScopeDayKey(scope, tt.at), BudgetScopeWeekKey(scope, tt.at), "budget:" + tt.day,
		}, r.Ticket.(*ticket).keys, tt.name)

		c, err := b.counts(ctx, budgetMs(tt.at))
		require.NoError(t, err, tt.name)
		require.Equal(t, "budget:"+tt.day, c.dayKey, tt.name)
		require.Equal(t, "budget:w:"+tt.monday, c.weekKey, tt.name)
	}

	// A sweep of instants from 1970 to 2400, each held to Go's answer. One
	// script call per instant on a pipeline-free client: about a second.
	rng := rand.New(rand.NewPCG(1, 2))
	end := time.Date(2400, 12, 31, 0, 0, 0, 0, time.UTC).UnixMilli()
	for i := range 1500 {
		msv := rng.Int64N(end)
		if i%3 == 0 { // favour the edges of a day
			msv = msv - msv%86400000 - int64(i%2)
			msv = max(msv, 0)
		}
		at := time.UnixMilli(msv).UTC()
		c, err := b.counts(ctx, strconv.FormatInt(msv, 10))
		require.NoError(t, err)
		require.Equal(t, BudgetDayKey(at), c.dayKey, "%d (%s)", msv, at)
		require.Equal(t, BudgetWeekKey(at), c.weekKey, "%d (%s)", msv, at)
		require.Equal(t, BudgetMonthKey(at), c.monthKey, "%d (%s)", msv, at)
		require.Equal(t, at, c.now)
	}

	// A malformed override is an error, never a date.
	for _, bad := range []string{"x", "1.5", "-1", "1e20"} {
		_, err := b.counts(ctx, bad)
		require.ErrorIs(t, err, dispatch.ErrBudgetUnavailable, bad)
	}
}

func TestBudgetJunkCounterFailsClosedAndUndoes(t *testing.T) {
	t.Parallel()
	db := livetest.Valkey(t)
	ctx := context.Background()
	var logs logtest.Buffer
	b := NewBudget(db.Client, BudgetConfig{DailyCap: 5, Logger: logs.Logger()})
	const scope = "owner/junk"
	limit := &dispatch.ScopeLimit{Scope: scope, Day: 5}
	require.NoError(t, db.Client.Set(ctx, BudgetDayKey(budgetAt), "not a count\x00", 0).Err())

	_, err := b.reserve(ctx, scope, limit, budgetMs(budgetAt))
	require.ErrorIs(t, err, dispatch.ErrBudgetUnavailable)
	require.Contains(t, err.Error(), "window day")
	// The scope-day window was counted first, then given back.
	require.Equal(t, 0, budgetGet(t, db.Client, BudgetScopeDayKey(scope, budgetAt)))

	_, _, err = b.Counts(ctx)
	require.NoError(t, err, "Counts reads today; the junk is under the pinned date")
	_, err = b.counts(ctx, budgetMs(budgetAt))
	require.ErrorIs(t, err, dispatch.ErrBudgetUnavailable)

	require.NoError(t, db.Client.Del(ctx, BudgetDayKey(budgetAt)).Err())
	require.NoError(t, db.Client.HSet(ctx, BudgetDayKey(budgetAt), "f", "v").Err())
	_, err = b.reserve(ctx, scope, limit, budgetMs(budgetAt))
	require.ErrorIs(t, err, dispatch.ErrBudgetUnavailable, "a key of another type")
	require.Equal(t, 0, logs.Count(t, "budget_unreachable"), "a junk value is not an outage")
}

func TestBudgetValkeyDownFailsClosedWithinTheBound(t *testing.T) {
	t.Parallel()
	srv := livetest.StartServer(t)
	client := srv.Client()
	ctx := context.Background()
	var logs logtest.Buffer
	const bound = 300 * time.Millisecond
	b := NewBudget(client, BudgetConfig{DailyCap: 5, CallTimeout: bound, Logger: logs.Logger(), Host: "alpha"})

	r, err := b.Reserve(ctx, "", nil)
	require.NoError(t, err)
	require.True(t, r.Granted)

	srv.Stop()
	for range 2 {
		began := time.Now()
		_, err := b.Reserve(ctx, "", nil)
		require.ErrorIs(t, err, dispatch.ErrBudgetUnavailable)
		require.Less(t, time.Since(began), 10*bound, "a hang-catching bound")
	}
	_, _, err = b.Counts(ctx)
	require.ErrorIs(t, err, dispatch.ErrBudgetUnavailable)
	require.ErrorIs(t, b.Release(ctx, r), dispatch.ErrBudgetUnavailable)
	require.Equal(t, 1, logs.Count(t, "budget_unreachable"), "one line per outage")

	srv.Start()
	require.Eventually(t, func() bool {
		_, err := b.Reserve(ctx, "", nil)
		return err == nil
	}, 5*time.Second, 50*time.Millisecond)
	require.Equal(t, 1, logs.Count(t, "budget_restored"))
	require.Equal(t, 2, strings.Count(logs.String(), `"host":"alpha"`), "every line names the host")
	require.NoError(t, b.Close(ctx))
}

// TestBudgetHungServerIsBounded: a server that accepts and never answers cannot
// hold a reservation past CallTimeout, and Close waits for the abandoned call.
// Not parallel: it counts the process's goroutines.
func TestBudgetHungServerIsBounded(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var conns sync.WaitGroup
	var held sync.Mutex
	var open []net.Conn
	conns.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			held.Lock()
			open = append(open, c) // read nothing, answer nothing
			held.Unlock()
		}
	})
	before := runtime.NumGoroutine()
	client := redis.NewClient(&redis.Options{Addr: ln.Addr().String(), ReadTimeout: 800 * time.Millisecond, MaxRetries: -1})
	const bound = 150 * time.Millisecond
	b := NewBudget(client, BudgetConfig{CallTimeout: bound})

	began := time.Now()
	_, err = b.Reserve(context.Background(), "", nil)
	require.ErrorIs(t, err, dispatch.ErrBudgetUnavailable)
	// The call's own deadline ended it, not the client's 800ms read timeout
	// (that would be an i/o timeout): the error says which, on any machine.
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Less(t, time.Since(began), 10*time.Second, "a hang-catching bound")

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.NoError(t, b.Close(ctx), "the abandoned call ends with the client's read timeout")
	expired, stop := context.WithTimeout(context.Background(), 0)
	defer stop()
	require.NoError(t, b.calls.Wait(expired), "nothing in flight after Close")
	require.NoError(t, client.Close())
	require.NoError(t, ln.Close())
	held.Lock()
	for _, c := range open {
		c.Close()
	}
	held.Unlock()
	conns.Wait()
	budgetWaitGoroutines(t, before)
}

// budgetWaitGoroutines waits up to 3s for the process to be back to at most
// before goroutines. It polls in the test's own goroutine (require.Eventually
// would count its own).
func budgetWaitGoroutines(t *testing.T, before int) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			t.Fatalf("goroutines: %d before, %d after", before, runtime.NumGoroutine())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// ExampleBudget reserves a container start before running a job, and gives the
// slot back when the container never started.
func ExampleBudget() {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer client.Close()
	b := NewBudget(client, BudgetConfig{DailyCap: 25, WeeklyCap: 100})
	defer b.Close(context.Background())

	ctx := context.Background()
	limit := &dispatch.ScopeLimit{Scope: "owner/web", Day: 5}
	r, err := b.Reserve(ctx, "owner/web", limit)
	switch {
	case err != nil:
		fmt.Println("defer the job: the budget is unavailable, never spend blind")
		return
	case !r.Granted:
		fmt.Printf("refuse the job %s: %s window full (%d of %d)\n", r.Reason(), r.Window, r.Count, r.Cap)
		return
	}
	started := false // ... start the container ...
	if !started {
		_ = b.Release(ctx, r)
	}
}

// TestBudgetMonthWindows: the month windows' keys carry the server's month,
// across month and year ends and leap days, and get their 40-day lifetime.
func TestBudgetMonthWindows(t *testing.T) {
	t.Parallel()
	db := livetest.Valkey(t)
	ctx := context.Background()
	b := NewBudget(db.Client, BudgetConfig{DailyCap: dispatch.MaxCap, MonthlyCap: dispatch.MaxCap})
	const scope = "owner/months"
	limit := &dispatch.ScopeLimit{Scope: scope, Month: dispatch.MaxCap}
	for _, tt := range []struct {
		at    time.Time
		month string
	}{
		{time.Date(2026, 12, 31, 23, 59, 59, 999e6, time.UTC), "2026-12"},
		{time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC), "2027-01"},
		{time.Date(2028, 2, 29, 23, 59, 59, 999e6, time.UTC), "2028-02"},
		{time.Date(2028, 3, 1, 0, 0, 0, 0, time.UTC), "2028-03"},
		{time.Date(2026, 4, 30, 23, 59, 59, 999e6, time.UTC), "2026-04"},
	} {
		require.Equal(t, "budget:m:"+tt.month, BudgetMonthKey(tt.at))
		r, err := b.reserve(ctx, scope, limit, budgetMs(tt.at))
		require.NoError(t, err)
		require.True(t, r.Granted)
		require.Equal(t, []string{BudgetScopeMonthKey(scope, tt.at), BudgetDayKey(tt.at), BudgetMonthKey(tt.at)}, r.Ticket.(*ticket).keys, "%s", tt.at)
	}
	r, err := b.Reserve(ctx, scope, limit)
	require.NoError(t, err)
	for _, k := range r.Ticket.(*ticket).keys {
		pttl, err := db.Client.PTTL(ctx, k).Result()
		require.NoError(t, err)
		want := budgetDayTTL
		if strings.Contains(k, ":m:") {
			want = budgetMonthTTL
		}
		require.Greater(t, pttl, want-time.Minute, k)
		require.LessOrEqual(t, pttl, want, k)
	}
}

// TestBudgetSoftHoldCountsNothing: a soft refusal leaves every counter as it
// was, in every window it touched.
func TestBudgetSoftHoldCountsNothing(t *testing.T) {
	t.Parallel()
	db := livetest.Valkey(t)
	ctx := context.Background()
	b := NewBudget(db.Client, BudgetConfig{DailyCap: 10, WeeklyCap: 10, MonthlyCap: 4, SoftHoldPct: 75})
	const scope = "owner/soft"
	limit := &dispatch.ScopeLimit{Scope: scope, Day: 10}
	for range 3 {
		r, err := b.reserve(ctx, scope, limit, budgetMs(budgetAt))
		require.NoError(t, err)
		require.True(t, r.Granted)
	}
	r, err := b.reserve(ctx, scope, limit, budgetMs(budgetAt))
	require.NoError(t, err)
	require.Equal(t, dispatch.Reservation{Window: dispatch.WindowMonth, Count: 3, Cap: 4, Soft: true}, r)
	require.Equal(t, jobs.ReasonSoftHold, r.Reason())
	for _, k := range []string{BudgetScopeDayKey(scope, budgetAt), BudgetDayKey(budgetAt), BudgetWeekKey(budgetAt), BudgetMonthKey(budgetAt)} {
		require.Equal(t, 3, budgetGet(t, db.Client, k), k)
	}
}

func TestBudgetWindows(t *testing.T) {
	t.Parallel()
	db := livetest.Valkey(t)
	ctx := context.Background()
	b := NewBudget(db.Client, BudgetConfig{DailyCap: 7})
	ws, err := b.Windows(ctx)
	require.NoError(t, err)
	require.Len(t, ws, 1)
	require.Equal(t, dispatch.WindowDay, ws[0].Name)
	require.Equal(t, 7, ws[0].Cap)
	require.Zero(t, ws[0].Count)
	now := time.Now().UTC()
	require.True(t, ws[0].ResetsAt.After(now) && !ws[0].ResetsAt.After(now.Add(24*time.Hour)), "%s", ws[0].ResetsAt)

	b = NewBudget(db.Client, BudgetConfig{DailyCap: 7, WeeklyCap: 20, MonthlyCap: 50})
	_, err = b.Reserve(ctx, "", nil)
	require.NoError(t, err)
	ws, err = b.Windows(ctx)
	require.NoError(t, err)
	require.Len(t, ws, 3)
	for i, want := range []struct {
		name string
		cap  int
	}{{dispatch.WindowDay, 7}, {dispatch.WindowWeek, 20}, {dispatch.WindowMonth, 50}} {
		require.Equal(t, want.name, ws[i].Name)
		require.Equal(t, want.cap, ws[i].Cap)
		require.Equal(t, 1, ws[i].Count, want.name)
	}
	require.Equal(t, time.Monday, ws[1].ResetsAt.Weekday())
	require.Equal(t, 1, ws[2].ResetsAt.Day())

	// The ends of the windows of an instant, across a year end.
	at := time.Date(2026, 12, 31, 23, 59, 59, 0, time.UTC) // a Thursday
	require.Equal(t, time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC), DayEnd(at))
	require.Equal(t, time.Date(2027, 1, 4, 0, 0, 0, 0, time.UTC), WeekEnd(at))
	require.Equal(t, time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC), MonthEnd(at))
	sunday := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	require.Equal(t, time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC), WeekEnd(sunday))
	monday := time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)
	require.Equal(t, time.Date(2026, 12, 14, 0, 0, 0, 0, time.UTC), WeekEnd(monday))
}
