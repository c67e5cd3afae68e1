package fleetstate

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/internal/testkit/logtest"
)

func TestRateLimitsKeyExpiresAtTheReset(t *testing.T) {
	t.Parallel()
	db := livetest.Valkey(t)
	ctx := context.Background()
	l := NewRateLimits(db.Client, RateLimitsConfig{})
	until := time.Now().Add(90 * time.Second)
	require.NoError(t, l.Suspend(ctx, "anthropic", until, "429"))

	v, err := db.Client.Get(ctx, "ratelimit:anthropic").Result()
	require.NoError(t, err)
	require.Equal(t, strconv.FormatInt(until.UnixMilli(), 10)+" 429", v)
	pttl, err := db.Client.PTTL(ctx, RateLimitKey("anthropic")).Result()
	require.NoError(t, err)
	require.InDelta(t, 90*time.Second, pttl, float64(5*time.Second))
	members, err := db.Client.SMembers(ctx, RateLimitProvidersKey).Result()
	require.NoError(t, err)
	require.Equal(t, []string{"anthropic"}, members)
	setTTL, err := db.Client.PTTL(ctx, RateLimitProvidersKey).Result()
	require.NoError(t, err)
	require.Greater(t, setTTL, MaxSuspension, "the set outlives its longest member")

	// A later reset moves the expiry on; List prunes a name whose key is gone.
	require.NoError(t, l.Suspend(ctx, "anthropic", until.Add(time.Hour), "again"))
	pttl, err = db.Client.PTTL(ctx, RateLimitKey("anthropic")).Result()
	require.NoError(t, err)
	require.Greater(t, pttl, time.Hour)
	require.NoError(t, db.Client.Del(ctx, RateLimitKey("anthropic")).Err())
	got, err := l.List(ctx)
	require.NoError(t, err)
	require.Empty(t, got)
	n, err := db.Client.SCard(ctx, RateLimitProvidersKey).Result()
	require.NoError(t, err)
	require.Zero(t, n, "the gone name was pruned")
}

// TestRateLimitsHostileRowsAreRevalidated: rows another process wrote are read
// through the same rules as Suspend's, never trusted.
func TestRateLimitsHostileRowsAreRevalidated(t *testing.T) {
	t.Parallel()
	db := livetest.Valkey(t)
	ctx := context.Background()
	l := NewRateLimits(db.Client, RateLimitsConfig{})
	soon := strconv.FormatInt(time.Now().Add(time.Hour).UnixMilli(), 10)
	far := strconv.FormatInt(time.Now().Add(400*24*time.Hour).UnixMilli(), 10)
	rows := map[string]string{
		"bad-until":  "soon please",
		"past":       "1000 old",
		"far":        far + " forever",
		"dirty-why":  soon + " a\x1b[2Jb\x00" + strings.Repeat("x", 5000),
		"no-why":     soon,
		"Upper":      soon + " bad name",
		"../escape":  soon + " bad name",
		"ok":         soon + " fine",
		"negative":   "-5 x",
		"float":      "1e300 x",
		"empty":      "",
		"not-string": "",
	}
	for name, v := range rows {
		require.NoError(t, db.Client.SAdd(ctx, RateLimitProvidersKey, name).Err())
		if name == "not-string" {
			require.NoError(t, db.Client.HSet(ctx, RateLimitKey(name), "until", soon).Err())
			continue
		}
		require.NoError(t, db.Client.Set(ctx, RateLimitKey(name), v, 0).Err())
	}
	got, err := l.List(ctx)
	require.NoError(t, err)
	byName := map[string]dispatch.Suspension{}
	for _, s := range got {
		byName[s.Provider] = s
	}
	require.ElementsMatch(t, []string{"far", "dirty-why", "no-why", "ok"}, keysOf(byName))
	require.WithinDuration(t, time.Now().Add(MaxSuspension), byName["far"].Until, time.Minute, "a far reset is held to a day")
	require.Equal(t, "a[2Jb"+strings.Repeat("x", MaxSuspensionWhy-5), byName["dirty-why"].Why)
	require.Empty(t, byName["no-why"].Why)

	u, err := l.SuspendedUntil(ctx, "bad-until")
	require.NoError(t, err)
	require.True(t, u.IsZero())
	u, err = l.SuspendedUntil(ctx, "far")
	require.NoError(t, err)
	require.WithinDuration(t, time.Now().Add(MaxSuspension), u, time.Minute)

	// Suspend replaces what does not read as a suspension, even of another
	// type or beyond the bound, and keeps what does.
	until := time.Now().Add(10 * time.Minute)
	for _, name := range []string{"bad-until", "far", "not-string"} {
		require.NoError(t, l.Suspend(ctx, name, until, "real"), name)
		u, err := l.SuspendedUntil(ctx, name)
		require.NoError(t, err)
		require.Equal(t, until.UnixMilli(), u.UnixMilli(), name)
	}
	require.NoError(t, l.Suspend(ctx, "no-why", until, "shorter"))
	u, err = l.SuspendedUntil(ctx, "no-why")
	require.NoError(t, err)
	require.Equal(t, soon, strconv.FormatInt(u.UnixMilli(), 10), "a row without a reason still reads as a suspension")
	require.NoError(t, l.Suspend(ctx, "ok", until, "shorter"))
	u, err = l.SuspendedUntil(ctx, "ok")
	require.NoError(t, err)
	require.Equal(t, soon, strconv.FormatInt(u.UnixMilli(), 10))

	// A providers key of another type reads as no suspension, and is
	// replaced by the next Suspend.
	require.NoError(t, db.Client.Del(ctx, RateLimitProvidersKey).Err())
	require.NoError(t, db.Client.Set(ctx, RateLimitProvidersKey, "junk", 0).Err())
	got, err = l.List(ctx)
	require.NoError(t, err)
	require.Empty(t, got)
	require.NoError(t, l.Suspend(ctx, "fresh", until, "x"))
	got, err = l.List(ctx)
	require.NoError(t, err)
	require.Len(t, got, 1)
}

func keysOf(m map[string]dispatch.Suspension) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func TestRateLimitsValkeyDown(t *testing.T) {
	t.Parallel()
	srv := livetest.StartServer(t)
	ctx := context.Background()
	var logs logtest.Buffer
	l := NewRateLimits(srv.Client(), RateLimitsConfig{CallTimeout: 300 * time.Millisecond, Logger: logs.Logger(), Host: "alpha"})
	require.NoError(t, l.Suspend(ctx, "anthropic", time.Now().Add(time.Hour), "x"))
	srv.Stop()
	require.ErrorIs(t, l.Suspend(ctx, "anthropic", time.Now().Add(time.Hour), "x"), dispatch.ErrRateLimitsUnavailable)
	_, err := l.SuspendedUntil(ctx, "anthropic")
	require.ErrorIs(t, err, dispatch.ErrRateLimitsUnavailable)
	_, err = l.List(ctx)
	require.ErrorIs(t, err, dispatch.ErrRateLimitsUnavailable)
	require.Equal(t, 1, logs.Count(t, "ratelimits_unreachable"))
	require.Contains(t, logs.String(), `"host":"alpha"`)
	require.NoError(t, l.Close(ctx))
}
