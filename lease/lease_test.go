package lease

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/internal/testkit/logtest"
)

// Child mode: the multi-process safety test re-executes this test binary with
// these variables set, and the child runs an acquire loop instead of the tests.
const (
	childURLEnv    = "LEASE_TEST_CHILD_URL"
	childWorkerEnv = "LEASE_TEST_CHILD_WORKER"
	childRounds    = 150
	testSlots      = 3
)

// Test-only counters of the multi-process test; not production keys.
const (
	holdersKey    = "test:holders"
	maxHoldersKey = "test:holders:max"
	grantsKey     = "test:grants"
)

// holdScript counts a holder in and records the maximum seen.
//
// KEYS[1] -> the current holder count; KEYS[2] -> the maximum; KEYS[3] -> grants
var holdScript = redis.NewScript(`
local n = redis.call('INCR', KEYS[1])
redis.call('INCR', KEYS[3])
if n > tonumber(redis.call('GET', KEYS[2]) or '0') then
  redis.call('SET', KEYS[2], n)
end
return n
`)

func TestMain(m *testing.M) {
	if url := os.Getenv(childURLEnv); url != "" {
		os.Exit(runChild(url, os.Getenv(childWorkerEnv)))
	}
	os.Exit(m.Run())
}

// runChild acquires, counts itself in on the server, holds briefly, counts
// itself out and releases, childRounds times.
func runChild(url, worker string) int {
	opts, err := redis.ParseURL(url)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	c := redis.NewClient(opts)
	defer c.Close()
	l := New(c, worker, Config{})
	ctx := context.Background()
	keys := []string{holdersKey, maxHoldersKey, grantsKey}
	for i := range childRounds {
		h, err := l.Acquire(ctx, worker+"-"+strconv.Itoa(i), testSlots, 10*time.Second, fleet.CheckSlotKey)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		if h == nil {
			time.Sleep(time.Millisecond)
			continue
		}
		if h.Degraded() {
			fmt.Fprintln(os.Stderr, "degraded grant")
			return 1
		}
		if err := holdScript.Run(ctx, c, keys).Err(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		time.Sleep(2 * time.Millisecond)
		if err := c.Decr(ctx, holdersKey).Err(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		if err := h.Release(ctx); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	return 0
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestKeys(t *testing.T) {
	t.Parallel()
	require.Equal(t, "wait:check:0", fleet.CheckSlotKey(0))
	require.Equal(t, "slot:s:0123456789abcdef:2", fleet.ScopeSlotKey("0123456789abcdef", 2))
	// sha256("hello") = 2cf24dba5fb0a30e26e83b2ac5b9e29e...: the first 16 hex digits.
	require.Equal(t, "2cf24dba5fb0a30e", fleet.ScopeHash("hello"))
	require.Regexp(t, `^[0-9a-f]{16}$`, fleet.ScopeHash("acme/web"))
}

// TestStartIndex pins the original's Java-style hash: "abc" hashes to 96354,
// and a hash past int32 wraps negative and is taken absolute.
func TestStartIndex(t *testing.T) {
	t.Parallel()
	require.Equal(t, 96354%7, startIndex("abc", 7))
	require.Equal(t, 0, startIndex("", 5))
	// "polygenelubricants" hashes to math.MinInt32 in Java; |MinInt32| % 10 = 8.
	require.Equal(t, 2147483648%10, startIndex("polygenelubricants", 10))
	// A non-BMP rune is two UTF-16 code units, as charCodeAt reads it.
	require.Equal(t, int((int64(0xD83D)*31+0xDE00)%1000), startIndex("\U0001F600", 1000))
	for _, id := range []string{"gh-1", "x", "\xff\x00", strings.Repeat("z", 1000)} {
		i := startIndex(id, 3)
		require.GreaterOrEqual(t, i, 0)
		require.Less(t, i, 3)
	}
}

// TestAcquire_ProbesFromTheHashAndWraps fills the slots one by one: each id
// gets its start slot while free, the next free one (wrapping) otherwise, and
// nil when all are held.
func TestAcquire_ProbesFromTheHashAndWraps(t *testing.T) {
	t.Parallel()
	db := livetest.Valkey(t)
	ctx := testCtx(t)
	l := New(db.Client, "mini1", Config{})

	id := "abc" // start index 96354 % 3 = 0
	h1, err := l.Acquire(ctx, id, 3, time.Minute, fleet.CheckSlotKey)
	require.NoError(t, err)
	require.Equal(t, "wait:check:0", h1.Key())
	require.False(t, h1.Degraded())
	require.Equal(t, "mini1#abc", db.Client.Get(ctx, "wait:check:0").Val())
	pttl := db.Client.PTTL(ctx, "wait:check:0").Val()
	require.Greater(t, pttl, 50*time.Second)

	h2, err := l.Acquire(ctx, id, 3, time.Minute, fleet.CheckSlotKey)
	require.NoError(t, err)
	require.Equal(t, "wait:check:1", h2.Key(), "the same id is not re-entrant: it takes the next slot")

	require.NoError(t, db.Client.Set(ctx, "wait:check:2", "other#x", time.Minute).Err())
	h3, err := l.Acquire(ctx, "other-id", 3, time.Minute, fleet.CheckSlotKey)
	require.NoError(t, err)
	require.Nil(t, h3, "all slots held")

	require.NoError(t, h1.Release(ctx))
	wrapID := ""
	for i := 0; wrapID == ""; i++ {
		if id := "id-" + strconv.Itoa(i); startIndex(id, 3) == 1 {
			wrapID = id
		}
	}
	h4, err := l.Acquire(ctx, wrapID, 3, time.Minute, fleet.CheckSlotKey) // 1 and 2 held: wraps to 0
	require.NoError(t, err)
	require.Equal(t, "wait:check:0", h4.Key())
}

func TestAcquire_Arguments(t *testing.T) {
	t.Parallel()
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	l := New(c, "mini1", Config{})
	ctx := testCtx(t)

	h, err := l.Acquire(ctx, "j", 0, time.Minute, fleet.CheckSlotKey)
	require.NoError(t, err)
	require.Empty(t, h.Key(), "slots < 1: unbounded, Valkey not asked")
	require.False(t, h.Degraded())
	require.NoError(t, h.Release(ctx))
	ok, err := h.Refresh(ctx, time.Minute)
	require.NoError(t, err)
	require.True(t, ok)

	_, err = l.Acquire(ctx, "j", 2, 0, fleet.CheckSlotKey)
	require.Error(t, err)
	_, err = l.Acquire(ctx, "j", 2, time.Minute, nil)
	require.Error(t, err)

	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	_, err = l.Acquire(cancelled, "j", 2, time.Minute, fleet.CheckSlotKey)
	require.ErrorIs(t, err, context.Canceled, "a cancelled caller is not a Valkey fault")
}

// TestHandle_ReleaseAndRefreshActOnlyOnTheirOwnSlot: a double release frees
// nothing of the next holder; a refresh after the slot was lost reports false
// and does not extend the new holder's TTL.
func TestHandle_ReleaseAndRefreshActOnlyOnTheirOwnSlot(t *testing.T) {
	t.Parallel()
	db := livetest.Valkey(t)
	ctx := testCtx(t)
	a := New(db.Client, "host-a", Config{})
	b := New(db.Client, "host-b", Config{})

	ha, err := a.Acquire(ctx, "job1", 1, time.Minute, fleet.CheckSlotKey)
	require.NoError(t, err)
	ok, err := ha.Refresh(ctx, 2*time.Minute)
	require.NoError(t, err)
	require.True(t, ok)
	require.Greater(t, db.Client.PTTL(ctx, ha.Key()).Val(), time.Minute)

	require.NoError(t, ha.Release(ctx))
	hb, err := b.Acquire(ctx, "job2", 1, time.Minute, fleet.CheckSlotKey)
	require.NoError(t, err)
	require.NotNil(t, hb)

	require.NoError(t, ha.Release(ctx), "second release")
	require.Equal(t, "host-b#job2", db.Client.Get(ctx, hb.Key()).Val(), "a double release freed another holder's slot")

	ok, err = ha.Refresh(ctx, 10*time.Minute)
	require.NoError(t, err)
	require.False(t, ok, "refresh of a lost slot")
	require.LessOrEqual(t, db.Client.PTTL(ctx, hb.Key()).Val(), time.Minute)

	// Lost by expiry, then taken: the same.
	require.NoError(t, hb.Release(ctx))
	hx, err := a.Acquire(ctx, "job3", 1, 30*time.Millisecond, fleet.CheckSlotKey)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return db.Client.Exists(ctx, hx.Key()).Val() == 0 }, time.Second, 5*time.Millisecond)
	hy, err := b.Acquire(ctx, "job4", 1, time.Minute, fleet.CheckSlotKey)
	require.NoError(t, err)
	ok, err = hx.Refresh(ctx, time.Minute)
	require.NoError(t, err)
	require.False(t, ok)
	require.NoError(t, hx.Release(ctx))
	require.Equal(t, "host-b#job4", db.Client.Get(ctx, hy.Key()).Val())
}

// TestAcquire_NeverMoreHoldersThanSlots: 16 goroutines x 500 acquire, hold,
// release on 3 slots; a holder counts itself in after Acquire returns and out
// before Release, so the count can only under-state the true holders.
func TestAcquire_NeverMoreHoldersThanSlots(t *testing.T) {
	t.Parallel()
	db := livetest.Valkey(t)
	ctx := testCtx(t)
	var holders, maxHolders, grants, denials atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for g := range 16 {
		wg.Go(func() {
			l := New(db.Client, "w"+strconv.Itoa(g), Config{})
			for i := range 500 {
				h, err := l.Acquire(ctx, strconv.Itoa(i), testSlots, 10*time.Second, fleet.CheckSlotKey)
				if err != nil || (h != nil && h.Degraded()) {
					errs <- fmt.Errorf("acquire: %v degraded=%v", err, h != nil && h.Degraded())
					return
				}
				if h == nil {
					denials.Add(1)
					continue
				}
				grants.Add(1)
				n := holders.Add(1)
				for {
					m := maxHolders.Load()
					if n <= m || maxHolders.CompareAndSwap(m, n) {
						break
					}
				}
				time.Sleep(200 * time.Microsecond) // hold
				holders.Add(-1)
				if err := h.Release(ctx); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	t.Logf("grants=%d denials=%d max=%d", grants.Load(), denials.Load(), maxHolders.Load())
	require.LessOrEqual(t, maxHolders.Load(), int64(testSlots))
	require.Greater(t, maxHolders.Load(), int64(1), "no contention: the test proves nothing")
	require.Positive(t, denials.Load(), "no contention: the test proves nothing")
	require.Equal(t, int64(16*500), grants.Load()+denials.Load())
	require.Zero(t, db.Client.Exists(ctx, fleet.CheckSlotKey(0), fleet.CheckSlotKey(1), fleet.CheckSlotKey(2)).Val(), "a slot leaked")
}

// TestAcquire_NeverMoreHoldersThanSlotsAcrossProcesses runs the loop in four
// processes; each counts itself in and out on the server, and the server keeps
// the maximum.
func TestAcquire_NeverMoreHoldersThanSlotsAcrossProcesses(t *testing.T) {
	t.Parallel()
	db := livetest.Valkey(t)
	ctx := testCtx(t)
	var cmds []*exec.Cmd
	var outs []*bytes.Buffer
	for p := range 4 {
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), childURLEnv+"="+db.URL, childWorkerEnv+"=proc"+strconv.Itoa(p))
		out := &bytes.Buffer{}
		cmd.Stdout, cmd.Stderr = out, out
		require.NoError(t, cmd.Start())
		cmds = append(cmds, cmd)
		outs = append(outs, out)
	}
	for i, cmd := range cmds {
		require.NoError(t, cmd.Wait(), "child %d: %s", i, outs[i].String())
	}
	maxHeld, err := db.Client.Get(ctx, maxHoldersKey).Int()
	require.NoError(t, err)
	grants, err := db.Client.Get(ctx, grantsKey).Int()
	require.NoError(t, err)
	t.Logf("grants=%d max=%d", grants, maxHeld)
	require.LessOrEqual(t, maxHeld, testSlots)
	require.Greater(t, maxHeld, 1, "no contention: the test proves nothing")
	require.Less(t, grants, 4*childRounds, "no denials: the test proves nothing")
	require.Equal(t, "0", db.Client.Get(ctx, holdersKey).Val())
}

// TestLease_Outage: against a stopped server Acquire grants degraded within
// its bound and logs one unavailable line; after the restart it takes real
// slots again and logs one restored line.
func TestLease_Outage(t *testing.T) {
	t.Parallel()
	srv := livetest.StartServer(t)
	ctx := testCtx(t)
	logs := &logtest.Buffer{}
	l := New(srv.Client(), "mini1", Config{Logger: logs.Logger()})

	srv.Stop()
	for range 3 {
		start := time.Now()
		h, err := l.Acquire(ctx, "job", 2, time.Minute, fleet.CheckSlotKey)
		require.NoError(t, err)
		require.Less(t, time.Since(start), 10*DefaultCallTimeout, "a hang-catching bound")
		require.True(t, h.Degraded())
		require.Empty(t, h.Key())
		require.NoError(t, h.Release(ctx))
		ok, err := h.Refresh(ctx, time.Minute)
		require.NoError(t, err)
		require.True(t, ok)
	}
	require.Len(t, logs.Events(t, "fleet_lease_unavailable"), 1)
	require.Equal(t, "mini1", logs.Events(t, "fleet_lease_unavailable")[0]["host"])

	srv.Start()
	var h *Handle
	require.Eventually(t, func() bool {
		var err error
		h, err = l.Acquire(ctx, "job", 2, time.Minute, fleet.CheckSlotKey)
		return err == nil && h != nil && !h.Degraded()
	}, 3*time.Second, 20*time.Millisecond)
	require.NotEmpty(t, h.Key())
	require.Len(t, logs.Events(t, "fleet_lease_restored"), 1)
	require.Len(t, logs.Events(t, "fleet_lease_unavailable"), 1)

	// A held slot whose server goes away: release and refresh return errors
	// within the bound, and refresh still reports the slot as ours.
	srv.Stop()
	start := time.Now()
	require.Error(t, h.Release(ctx))
	ok, err := h.Refresh(ctx, time.Minute)
	require.Error(t, err)
	require.True(t, ok, "a blip is no evidence that the slot was lost")
	require.Less(t, time.Since(start), 10*DefaultCallTimeout, "a hang-catching bound")
}

// TestLease_HungServerBounded: a server that never answers cannot hold
// Acquire past CallTimeout, whatever the client's own read timeout.
func TestLease_HungServerBounded(t *testing.T) {
	t.Parallel()
	addr := hungServer(t)
	c := redis.NewClient(&redis.Options{Addr: addr, ReadTimeout: time.Minute, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	l := New(c, "mini1", Config{CallTimeout: 200 * time.Millisecond})
	ctx := testCtx(t)
	start := time.Now()
	h, err := l.Acquire(ctx, "job", 3, time.Minute, fleet.CheckSlotKey)
	require.NoError(t, err)
	require.True(t, h.Degraded())
	// 10x the call timeout, far below the client's minute: only a hang fails it.
	require.Less(t, time.Since(start), 10*200*time.Millisecond+8*time.Second)
}

// TestAcquire_LateAnswerIsGivenBack: a script that answers after Acquire gave
// up (and granted degraded) must not leave its slot held by nobody.
func TestAcquire_LateAnswerIsGivenBack(t *testing.T) {
	t.Parallel()
	db := livetest.Valkey(t)
	ctx := testCtx(t)
	c := redis.NewClient(&redis.Options{Addr: db.Client.Options().Addr, DB: db.DB})
	t.Cleanup(func() { _ = c.Close() })
	c.AddHook(delayHook{delay: 300 * time.Millisecond})
	l := New(c, "mini1", Config{CallTimeout: 100 * time.Millisecond})

	h, err := l.Acquire(ctx, "job", 1, time.Minute, fleet.CheckSlotKey)
	require.NoError(t, err)
	require.True(t, h.Degraded())
	// The script ran after the bound and took the slot; the late handler
	// releases it.
	require.Eventually(t, func() bool { return db.Client.Get(ctx, fleet.CheckSlotKey(0)).Val() == "mini1#job" },
		3*time.Second, 5*time.Millisecond, "the late script never ran: the test proves nothing")
	require.Eventually(t, func() bool { return db.Client.Exists(ctx, fleet.CheckSlotKey(0)).Val() == 0 },
		3*time.Second, 20*time.Millisecond, "late-won slot left held")
}

// delayHook delays every command before sending it: a slow server whose
// answer arrives after the caller's bound.
type delayHook struct{ delay time.Duration }

func (h delayHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h delayHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		time.Sleep(h.delay)
		return next(context.WithoutCancel(ctx), cmd)
	}
}

func (h delayHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// hungServer accepts connections and never answers: a Valkey that hangs.
func hungServer(t testing.TB) string {
	t.Helper()
	livetest.SkipShort(t) // a hung server is waited out: not for the short lane
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return ln.Addr().String()
}
