package lease

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/internal/testkit/logtest"
)

// TestSweepOwnClaims deletes this worker's scope claims and nothing else, and
// does nothing at all unless the reaper enumerated.
func TestSweepOwnClaims(t *testing.T) {
	t.Parallel()
	db := livetest.Valkey(t)
	ctx := testCtx(t)
	c := db.Client
	logs := &logtest.Buffer{}
	l := New(c, "w1", Config{Logger: logs.Logger()})

	web, api := fleet.ScopeHash("acme/web"), fleet.ScopeHash("acme/api")
	set := func(key, holder string) {
		t.Helper()
		require.NoError(t, c.Set(ctx, key, holder, time.Hour).Err())
	}
	set(fleet.ScopeSlotKey(web, 0), "w1#job-1")
	set(fleet.ScopeSlotKey(web, 1), "w2#job-2")
	set(fleet.ScopeSlotKey(api, 0), "w10#job-3") // a name that w1 is a prefix of
	set(fleet.ScopeSlotKey(api, 1), "w1#job-4")
	set(fleet.ScopeSlotKey(api, 2), "w1#job-5")
	set(fleet.ScopeSlotKey(api, 3), "w1#job-6") // beyond the configured bound: not swept
	set(fleet.ScopeSlotKey(fleet.ScopeHash("other"), 0), "w1#job-7")
	require.NoError(t, c.HSet(ctx, fleet.ScopeSlotKey(web, 2), "a", "b").Err()) // not a string
	rows := []ScopeRow{{Scope: "acme/web", Concurrent: 3}, {Scope: "acme/api", Concurrent: 3}, {Scope: "none", Concurrent: 0}}

	n, err := l.SweepOwnClaims(ctx, false, rows)
	require.NoError(t, err)
	require.Zero(t, n)
	require.Len(t, logs.Events(t, "scope_claims_sweep_skipped"), 1)
	require.Equal(t, "w1", logs.Events(t, "scope_claims_sweep_skipped")[0]["host"])
	require.NotEmpty(t, logs.Events(t, "scope_claims_sweep_skipped")[0]["reason"])
	require.Equal(t, int64(8), c.Exists(ctx, fleet.ScopeSlotKey(web, 0), fleet.ScopeSlotKey(web, 1), fleet.ScopeSlotKey(web, 2),
		fleet.ScopeSlotKey(api, 0), fleet.ScopeSlotKey(api, 1), fleet.ScopeSlotKey(api, 2), fleet.ScopeSlotKey(api, 3),
		fleet.ScopeSlotKey(fleet.ScopeHash("other"), 0)).Val(), "a skipped sweep deleted something")

	n, err = l.SweepOwnClaims(ctx, true, rows)
	require.NoError(t, err)
	require.Equal(t, 3, n)
	require.Zero(t, c.Exists(ctx, fleet.ScopeSlotKey(web, 0), fleet.ScopeSlotKey(api, 1), fleet.ScopeSlotKey(api, 2)).Val())
	require.Equal(t, "w2#job-2", c.Get(ctx, fleet.ScopeSlotKey(web, 1)).Val())
	require.Equal(t, "w10#job-3", c.Get(ctx, fleet.ScopeSlotKey(api, 0)).Val())
	require.Equal(t, "w1#job-6", c.Get(ctx, fleet.ScopeSlotKey(api, 3)).Val())
	require.Equal(t, "w1#job-7", c.Get(ctx, fleet.ScopeSlotKey(fleet.ScopeHash("other"), 0)).Val())
	require.Equal(t, int64(1), c.Exists(ctx, fleet.ScopeSlotKey(web, 2)).Val())
	swept := logs.Events(t, "scope_claims_swept")
	require.Len(t, swept, 1)
	require.EqualValues(t, 3, swept[0]["count"])
}

// TestSweepOwnClaims_ManySlots sweeps more keys than one script call takes.
func TestSweepOwnClaims_ManySlots(t *testing.T) {
	t.Parallel()
	db := livetest.Valkey(t)
	ctx := testCtx(t)
	l := New(db.Client, "w1", Config{})
	h := fleet.ScopeHash("big")
	pipe := db.Client.Pipeline()
	for i := range 1300 {
		pipe.Set(ctx, fleet.ScopeSlotKey(h, i), "w1#j", time.Hour)
	}
	_, err := pipe.Exec(ctx)
	require.NoError(t, err)
	n, err := l.SweepOwnClaims(ctx, true, []ScopeRow{{Scope: "big", Concurrent: 1300}})
	require.NoError(t, err)
	require.Equal(t, 1300, n)
}

// TestSweepOwnClaims_Unreachable returns the fault, bounded, for the caller to
// log; boot goes on.
func TestSweepOwnClaims_Unreachable(t *testing.T) {
	t.Parallel()
	srv := livetest.StartServer(t)
	srv.Stop()
	l := New(srv.Client(), "w1", Config{CallTimeout: 300 * time.Millisecond})
	start := time.Now()
	n, err := l.SweepOwnClaims(testCtx(t), true, []ScopeRow{{Scope: "s", Concurrent: 2}})
	require.Error(t, err)
	require.Zero(t, n)
	require.Less(t, time.Since(start), 10*time.Second, "a hang-catching bound")
}
