package registry

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/internal/testkit/logtest"
)

// outageBound is what "every call returns within its bound" means in a test
// that must pass on a loaded machine: a hang-catching bound, 10x the 2 s
// CallTimeout.
const outageBound = 20 * time.Second

// TestRegistry_Outage stops the server under a beating registry: every call
// returns within its bound, one unreachable line is logged over many beats,
// and one restored line when the server comes back.
func TestRegistry_Outage(t *testing.T) {
	t.Parallel()
	srv := livetest.StartServer(t)
	ctx := testCtx(t)
	logs := &logtest.Buffer{}
	cfg := Config{TTL: 2 * time.Second, Interval: 50 * time.Millisecond, Logger: logs.Logger()}
	r := newRegistry(t, srv.Client(), "mini1", staticFacts(), cfg)
	require.NoError(t, r.Start(ctx))

	srv.Stop()
	start := time.Now()
	err := r.Publish(ctx)
	require.ErrorIs(t, err, ErrUnreachable)
	require.Less(t, time.Since(start), outageBound)

	start = time.Now()
	_, err = r.ReadLive(ctx)
	require.ErrorIs(t, err, ErrUnreachable)
	require.Less(t, time.Since(start), outageBound)

	time.Sleep(400 * time.Millisecond) // several beats against the stopped server
	require.Equal(t, 1, logs.Count(t, "host_registry_unreachable"))
	require.Zero(t, logs.Count(t, "host_registry_restored"))

	srv.Start() // empty: no persistence
	require.Eventually(t, func() bool { return logs.Count(t, "host_registry_restored") == 1 }, 3*time.Second, 10*time.Millisecond)
	hosts, err := r.ReadLive(ctx)
	require.NoError(t, err)
	require.Len(t, hosts, 1, "the beat republished the row after the restart")
	time.Sleep(200 * time.Millisecond)
	require.Equal(t, 1, logs.Count(t, "host_registry_unreachable"))
	require.Equal(t, 1, logs.Count(t, "host_registry_restored"))

	srv.Stop()
	start = time.Now()
	require.ErrorIs(t, r.Close(ctx), ErrUnreachable)
	require.Less(t, time.Since(start), outageBound)
	logs.EveryLineHasHost(t, "mini1")
}

// TestRegistry_StartWithValkeyDown: boot does not wait on Valkey.
func TestRegistry_StartWithValkeyDown(t *testing.T) {
	t.Parallel()
	srv := livetest.StartServer(t)
	srv.Stop()
	ctx := testCtx(t)
	logs := &logtest.Buffer{}
	r := newRegistry(t, srv.Client(), "mini1", staticFacts(), Config{TTL: time.Second, Interval: 50 * time.Millisecond, Logger: logs.Logger()})
	start := time.Now()
	require.NoError(t, r.Start(ctx))
	require.Less(t, time.Since(start), outageBound)
	require.Equal(t, 1, logs.Count(t, "host_registry_unreachable"))

	srv.Start()
	c := srv.Client()
	require.Eventually(t, func() bool { return c.Exists(ctx, HostKey("mini1")).Val() == 1 }, 3*time.Second, 10*time.Millisecond,
		"the beat did not claim and publish once Valkey came up")
	require.NoError(t, r.Close(ctx))
	require.Zero(t, c.Exists(ctx, HostKey("mini1"), ClaimKey("mini1")).Val())
}

// TestRegistry_HungServerBounded: a server that accepts and never answers
// cannot hold a call past CallTimeout, even with a client whose own read
// timeout is far longer.
func TestRegistry_HungServerBounded(t *testing.T) {
	t.Parallel()
	addr := hungServer(t)
	c := redis.NewClient(&redis.Options{Addr: addr, ReadTimeout: 10 * time.Second, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	logs := &logtest.Buffer{}
	ctx := testCtx(t)
	r := newRegistry(t, c, "mini1", staticFacts(), Config{CallTimeout: 200 * time.Millisecond, Logger: logs.Logger()})

	// Unbounded, each call would wait for the client's 10 s read timeout;
	// bounded, it takes 200 ms. The bound between, 10x the call timeout,
	// tells them apart on a loaded machine.
	within := func(call func() error) {
		t.Helper()
		start := time.Now()
		require.ErrorIs(t, call(), ErrUnreachable)
		require.Less(t, time.Since(start), 2*time.Second)
	}
	start := time.Now()
	within(func() error { return r.Publish(ctx) })
	within(func() error { _, err := r.ReadLive(ctx); return err })
	within(func() error { _, err := ReadLive(ctx, c, 200*time.Millisecond); return err })

	// Close waits for the calls that overran (up to the client's own 10 s
	// read timeout), so no goroutine outlives it.
	closeCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	require.ErrorIs(t, r.Close(closeCtx), ErrUnreachable)
	require.Less(t, time.Since(start), 30*time.Second)
}
