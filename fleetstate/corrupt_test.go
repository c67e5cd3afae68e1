package fleetstate

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
)

// A counter a Valkey writer set to a negative, non-numeric or absurd value,
// in any count or dollar window, global or scoped, fails closed: Reserve
// returns ErrBudgetCorrupt and counts nothing. A negative day count used to
// lift the cap: INCR of -1000 is far below any cap.
func TestBudgetCorruptCountersFailClosed(t *testing.T) {
	t.Parallel()
	db := livetest.Valkey(t)
	ctx := context.Background()
	const scope = "acme/widgets"
	limit := &dispatch.ScopeLimit{Scope: scope, Day: 5, Week: 10, Month: 20}
	b := NewBudget(db.Client, BudgetConfig{DailyCap: 3, WeeklyCap: 10, MonthlyCap: 20})
	keys := []string{
		BudgetDayKey(budgetAt), BudgetWeekKey(budgetAt), BudgetMonthKey(budgetAt),
		BudgetScopeDayKey(scope, budgetAt), BudgetScopeWeekKey(scope, budgetAt), BudgetScopeMonthKey(scope, budgetAt),
	}
	for _, key := range keys {
		for _, junk := range []string{"-1000", "-1", "lots", "1.5", " 2", strconv.Itoa(maxSaneCount + 1), "99999999999999999999"} {
			require.NoError(t, db.Client.Set(ctx, key, junk, 0).Err())
			r, err := b.reserve(ctx, scope, limit, budgetMs(budgetAt))
			require.ErrorIs(t, err, dispatch.ErrBudgetCorrupt, "%s = %q", key, junk)
			require.False(t, r.Granted, "%s = %q", key, junk)
			v, err := db.Client.Get(ctx, key).Result()
			require.NoError(t, err)
			require.Equal(t, junk, v, "the corrupt key is left for the operator")
			for _, other := range keys {
				if other != key {
					require.Zero(t, budgetGet(t, db.Client, other), "nothing counted in %s", other)
				}
			}
		}
		require.NoError(t, db.Client.Del(ctx, key).Err())
		require.NoError(t, db.Client.LPush(ctx, key, "x").Err())
		_, err := b.reserve(ctx, scope, limit, budgetMs(budgetAt))
		require.ErrorIs(t, err, dispatch.ErrBudgetCorrupt, "%s of another type", key)
		require.NoError(t, db.Client.Del(ctx, key).Err())
	}
	r, err := b.reserve(ctx, scope, limit, budgetMs(budgetAt))
	require.NoError(t, err)
	require.True(t, r.Granted, "repaired keys count again")
}

func TestDollarsCorruptWindowsFailClosed(t *testing.T) {
	t.Parallel()
	db := livetest.Valkey(t)
	ctx := context.Background()
	const scope = "acme/widgets"
	limit := &dispatch.ScopeLimit{Scope: scope, DailyCostMicros: 5 * usd, WeeklyCostMicros: 5 * usd, MonthlyCostMicros: 5 * usd}
	d := NewDollars(db.Client, DollarsConfig{DailyMicros: 10 * usd, WeeklyMicros: 10 * usd, MonthlyMicros: 10 * usd})
	keys := []string{
		DollarDayKey(budgetAt), DollarWeekKey(budgetAt), DollarMonthKey(budgetAt),
		DollarScopeDayKey(scope, budgetAt), DollarScopeWeekKey(scope, budgetAt), DollarScopeMonthKey(scope, budgetAt),
	}
	for _, key := range keys {
		for _, junk := range []string{"-100000000000", "-1", "lots", "1e3", strconv.FormatInt(maxSaneMicros+1, 10)} {
			require.NoError(t, db.Client.Set(ctx, key, junk, 0).Err())
			r, err := d.reserve(ctx, "gh-1", scope, limit, usd, time.Minute, budgetMs(budgetAt))
			require.ErrorIs(t, err, dispatch.ErrBudgetCorrupt, "%s = %q", key, junk)
			require.False(t, r.Granted)
		}
		require.NoError(t, db.Client.Del(ctx, key).Err())
		// A live reservation's amount is a window's count too.
		require.NoError(t, db.Client.ZAdd(ctx, DollarReservationsKey(key), redis.Z{Score: 9e15, Member: "m"}).Err())
		require.NoError(t, db.Client.HSet(ctx, DollarAmountsKey(key), "m", "-5000000000").Err())
		_, err := d.reserve(ctx, "gh-1", scope, limit, usd, time.Minute, budgetMs(budgetAt))
		require.ErrorIs(t, err, dispatch.ErrBudgetCorrupt, "%s with a negative reservation", key)
		require.NoError(t, db.Client.Del(ctx, DollarReservationsKey(key), DollarAmountsKey(key)).Err())
	}
}

func TestSaneMicrosLua(t *testing.T) {
	require.Equal(t, strconv.FormatInt(maxSaneMicros, 10), maxSaneMicrosLua)
}
