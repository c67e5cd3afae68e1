package fleetstate

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/internal/testkit/logtest"
)

const usd = 1_000_000

func dollarGet(t *testing.T, c *redis.Client, key string) int64 {
	t.Helper()
	v, err := c.Get(context.Background(), key).Int64()
	if err == redis.Nil {
		return 0
	}
	require.NoError(t, err)
	return v
}

// TestDollarsKeysOfTheServersDate: the script holds a reservation in exactly
// the keys keys.go formats for the instant, across a year end and a leap day,
// and a settle lands in those same windows.
func TestDollarsKeysOfTheServersDate(t *testing.T) {
	t.Parallel()
	db := livetest.Valkey(t)
	ctx := context.Background()
	d := NewDollars(db.Client, DollarsConfig{DailyMicros: 100 * usd, WeeklyMicros: 100 * usd, MonthlyMicros: 100 * usd})
	const scope = "owner/usd"
	limit := &dispatch.ScopeLimit{Scope: scope, DailyCostMicros: 50 * usd, WeeklyCostMicros: 50 * usd, MonthlyCostMicros: 50 * usd}
	settled := map[string]int64{}
	for _, at := range []time.Time{
		time.Date(2026, 12, 31, 23, 59, 59, 999e6, time.UTC),
		time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(2028, 2, 29, 12, 0, 0, 0, time.UTC),
	} {
		r, err := d.reserve(ctx, "gh-1", scope, limit, 2*usd, time.Hour, budgetMs(at))
		require.NoError(t, err)
		require.True(t, r.Granted)
		want := []string{
			DollarScopeDayKey(scope, at), DollarScopeWeekKey(scope, at), DollarScopeMonthKey(scope, at),
			DollarDayKey(at), DollarWeekKey(at), DollarMonthKey(at),
		}
		tk := r.Ticket.(*dollarTicket)
		require.Equal(t, want, tk.keys, "%s", at)
		require.True(t, strings.HasPrefix(tk.member, "gh-1#"))
		for _, k := range want {
			amt, err := db.Client.HGet(ctx, DollarAmountsKey(k), tk.member).Int64()
			require.NoError(t, err, k)
			require.EqualValues(t, 2*usd, amt, k)
			score, err := db.Client.ZScore(ctx, DollarReservationsKey(k), tk.member).Result()
			require.NoError(t, err, k)
			require.EqualValues(t, at.Add(time.Hour).UnixMilli(), score, k)
		}
		require.NoError(t, d.SettleDollars(ctx, r, 750_000))
		for _, k := range want {
			settled[k] += 750_000 // the first two instants share a week
			require.Equal(t, settled[k], dollarGet(t, db.Client, k), k)
			n, err := db.Client.ZCard(ctx, DollarReservationsKey(k)).Result()
			require.NoError(t, err)
			require.Zero(t, n, k)
		}
	}
	require.Equal(t, "budget:usd:2026-12-31", DollarDayKey(time.Date(2026, 12, 31, 1, 0, 0, 0, time.UTC)))
	require.Equal(t, "budget:usd:w:2026-12-28", DollarWeekKey(time.Date(2026, 12, 31, 1, 0, 0, 0, time.UTC)))
	require.Equal(t, "budget:usd:m:2026-12", DollarMonthKey(time.Date(2026, 12, 31, 1, 0, 0, 0, time.UTC)))
	require.Equal(t, "budget:usd:2026-12-31:res", DollarReservationsKey("budget:usd:2026-12-31"))
	require.Equal(t, "budget:usd:2026-12-31:amt", DollarAmountsKey("budget:usd:2026-12-31"))
	require.Equal(t, "budget:usd:settle:abc", dollarSettleKey("abc"))
}

// TestDollarsSettleAfterTheWindowEnded: a job that started before midnight and
// ends after it settles in the day it started (the reservation's own windows).
func TestDollarsSettleAfterTheWindowEnded(t *testing.T) {
	t.Parallel()
	db := livetest.Valkey(t)
	ctx := context.Background()
	d := NewDollars(db.Client, DollarsConfig{DailyMicros: 10 * usd})
	late := time.Date(2026, 6, 3, 23, 59, 0, 0, time.UTC)
	r, err := d.reserve(ctx, "gh-2", "", nil, 3*usd, time.Hour, budgetMs(late))
	require.NoError(t, err)
	require.True(t, r.Granted)
	require.NoError(t, d.SettleDollars(ctx, r, 2*usd))
	require.EqualValues(t, 2*usd, dollarGet(t, db.Client, DollarDayKey(late)))
	require.Zero(t, dollarGet(t, db.Client, DollarDayKey(late.Add(time.Hour))))
}

func TestDollarsKeyTTLs(t *testing.T) {
	t.Parallel()
	db := livetest.Valkey(t)
	ctx := context.Background()
	d := NewDollars(db.Client, DollarsConfig{DailyMicros: 10 * usd, WeeklyMicros: 10 * usd, MonthlyMicros: 10 * usd})
	r, err := d.ReserveDollars(ctx, "gh-3", "", nil, usd, 2*time.Hour)
	require.NoError(t, err)
	require.NoError(t, d.SettleDollars(ctx, r, usd))
	tk := r.Ticket.(*dollarTicket)
	r2, err := d.ReserveDollars(ctx, "gh-4", "", nil, usd, 2*time.Hour)
	require.NoError(t, err)
	require.True(t, r2.Granted)
	for i, k := range tk.keys {
		life := keyTTL(tk.kinds[i])
		pttl, err := db.Client.PTTL(ctx, k).Result()
		require.NoError(t, err)
		require.Greater(t, pttl, life-time.Minute, k)
		require.LessOrEqual(t, pttl, life, k)
		for _, rk := range []string{DollarReservationsKey(k), DollarAmountsKey(k)} {
			pttl, err := db.Client.PTTL(ctx, rk).Result()
			require.NoError(t, err)
			require.Greater(t, pttl, life+2*time.Hour-time.Minute, rk)
		}
	}
	guard, err := db.Client.PTTL(ctx, dollarSettleKey(tk.token)).Result()
	require.NoError(t, err)
	require.Greater(t, guard, budgetMonthTTL)
}

// TestDollarsJunkFailsClosedAndHoldsNothing: a window holding something that
// is not micro-dollars refuses with ErrBudgetUnavailable, before any window
// is written; a settle into it fails and can be retried once it is fixed.
func TestDollarsJunkFailsClosedAndHoldsNothing(t *testing.T) {
	t.Parallel()
	db := livetest.Valkey(t)
	ctx := context.Background()
	d := NewDollars(db.Client, DollarsConfig{DailyMicros: 10 * usd, WeeklyMicros: 10 * usd})
	ok, err := d.reserve(ctx, "gh-5", "", nil, usd, time.Hour, budgetMs(budgetAt))
	require.NoError(t, err)
	for i, junk := range []func() error{
		func() error { return db.Client.Set(ctx, DollarWeekKey(budgetAt), "lots", 0).Err() },
		func() error { return db.Client.Set(ctx, DollarWeekKey(budgetAt), "1.5", 0).Err() },
		func() error { return db.Client.LPush(ctx, DollarWeekKey(budgetAt), "x").Err() },
		func() error { return db.Client.Set(ctx, DollarReservationsKey(DollarWeekKey(budgetAt)), "x", 0).Err() },
		func() error {
			k := DollarWeekKey(budgetAt)
			if err := db.Client.ZAdd(ctx, DollarReservationsKey(k), redis.Z{Score: 9e15, Member: "m"}).Err(); err != nil {
				return err
			}
			return db.Client.HSet(ctx, DollarAmountsKey(k), "m", "NaN").Err()
		},
	} {
		require.NoError(t, junk())
		r, err := d.reserve(ctx, "gh-6", "", nil, usd, time.Hour, budgetMs(budgetAt))
		require.ErrorIs(t, err, dispatch.ErrBudgetUnavailable, "junk %d", i)
		require.False(t, r.Granted)
		n, err := db.Client.HLen(ctx, DollarAmountsKey(DollarDayKey(budgetAt))).Result()
		require.NoError(t, err)
		require.EqualValues(t, 1, n, "only the first reservation is held in the day")
		if i < 4 { // a junk amount of another member does not stop a settle
			require.ErrorIs(t, d.SettleDollars(ctx, ok, usd), dispatch.ErrBudgetUnavailable, "junk %d", i)
		}
		k := DollarWeekKey(budgetAt)
		require.NoError(t, db.Client.Del(ctx, k, DollarReservationsKey(k), DollarAmountsKey(k)).Err())
	}
	require.NoError(t, d.SettleDollars(ctx, ok, usd), "a settle that failed before the guard can be retried")
	require.EqualValues(t, usd, dollarGet(t, db.Client, DollarDayKey(budgetAt)))
}

// TestDollarsRetriedSettleCountsOnce: a settle the server applied but whose
// answer was lost (the ticket does not know it settled) counts once on retry.
func TestDollarsRetriedSettleCountsOnce(t *testing.T) {
	t.Parallel()
	db := livetest.Valkey(t)
	ctx := context.Background()
	d := NewDollars(db.Client, DollarsConfig{DailyMicros: 10 * usd})
	r, err := d.ReserveDollars(ctx, "gh-7", "", nil, 2*usd, time.Hour)
	require.NoError(t, err)
	require.NoError(t, d.SettleDollars(ctx, r, usd))
	tk := r.Ticket.(*dollarTicket)
	tk.settled.done = false // as if the reply had been lost
	require.NoError(t, d.SettleDollars(ctx, r, usd))
	ws, err := d.Windows(ctx)
	require.NoError(t, err)
	require.Len(t, ws, 1)
	require.EqualValues(t, usd, ws[0].SpentMicros)
	require.Zero(t, ws[0].ReservedMicros)
}

func TestDollarsWindows(t *testing.T) {
	t.Parallel()
	db := livetest.Valkey(t)
	ctx := context.Background()
	none := NewDollars(db.Client, DollarsConfig{})
	ws, err := none.Windows(ctx)
	require.NoError(t, err)
	require.Empty(t, ws)
	r, err := none.ReserveDollars(ctx, "gh-8", "", nil, usd, time.Hour)
	require.NoError(t, err)
	require.True(t, r.Granted, "no window: nothing to hold")
	require.NoError(t, none.SettleDollars(ctx, r, usd))

	d := NewDollars(db.Client, DollarsConfig{DailyMicros: 10 * usd, WeeklyMicros: 20 * usd, MonthlyMicros: 30 * usd})
	r, err = d.ReserveDollars(ctx, "gh-9", "", nil, 4*usd, time.Hour)
	require.NoError(t, err)
	_, err = d.ReserveDollars(ctx, "gh-10", "", nil, usd, time.Hour)
	require.NoError(t, err)
	require.NoError(t, d.SettleDollars(ctx, r, 3*usd))
	ws, err = d.Windows(ctx)
	require.NoError(t, err)
	require.Len(t, ws, 3)
	for i, want := range []DollarWindow{
		{Name: dispatch.WindowDay, SpentMicros: 3 * usd, ReservedMicros: usd, CapMicros: 10 * usd},
		{Name: dispatch.WindowWeek, SpentMicros: 3 * usd, ReservedMicros: usd, CapMicros: 20 * usd},
		{Name: dispatch.WindowMonth, SpentMicros: 3 * usd, ReservedMicros: usd, CapMicros: 30 * usd},
	} {
		got := ws[i]
		require.True(t, got.ResetsAt.After(time.Now()), got.Name)
		got.ResetsAt = time.Time{}
		require.Equal(t, want, got)
	}
	require.Equal(t, time.Monday, ws[1].ResetsAt.Weekday())
	require.Equal(t, 1, ws[2].ResetsAt.Day())
}

func TestDollarsValkeyDown(t *testing.T) {
	t.Parallel()
	srv := livetest.StartServer(t)
	ctx := context.Background()
	var logs logtest.Buffer
	d := NewDollars(srv.Client(), DollarsConfig{DailyMicros: 10 * usd, CallTimeout: 300 * time.Millisecond, Logger: logs.Logger(), Host: "alpha"})
	r, err := d.ReserveDollars(ctx, "gh-11", "", nil, usd, time.Hour)
	require.NoError(t, err)
	srv.Stop()
	_, err = d.ReserveDollars(ctx, "gh-12", "", nil, usd, time.Hour)
	require.ErrorIs(t, err, dispatch.ErrBudgetUnavailable)
	require.ErrorIs(t, d.SettleDollars(ctx, r, usd), dispatch.ErrBudgetUnavailable)
	_, err = d.Windows(ctx)
	require.ErrorIs(t, err, dispatch.ErrBudgetUnavailable)
	require.Equal(t, 1, logs.Count(t, "dollars_unreachable"))
	srv.Start()
	require.Eventually(t, func() bool { return d.SettleDollars(ctx, r, usd) == nil }, 5*time.Second, 50*time.Millisecond)
	require.Equal(t, 1, logs.Count(t, "dollars_restored"))
	require.Equal(t, 2, strings.Count(logs.String(), `"host":"alpha"`))
	require.NoError(t, d.Close(ctx))
}

func TestDollarsBadArguments(t *testing.T) {
	t.Parallel()
	d := NewDollars(nil, DollarsConfig{DailyMicros: usd}) // never reaches Valkey
	ctx := context.Background()
	for _, tt := range []struct {
		micros int64
		ttl    time.Duration
	}{{-1, time.Hour}, {usd, 0}, {usd, time.Microsecond}} {
		_, err := d.ReserveDollars(ctx, "gh", "", nil, tt.micros, tt.ttl)
		require.Error(t, err)
		require.NotErrorIs(t, err, dispatch.ErrBudgetUnavailable)
	}
	err := d.SettleDollars(ctx, dispatch.DollarReservation{Granted: true, Ticket: &dollarTicket{keys: []string{"k"}, settled: &releaseRecord{}}}, -1)
	require.Error(t, err)
}
