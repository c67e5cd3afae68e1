package fleetstate

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/dispatch/dispatchtest"
	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/internal/testkit/logtest"
)

const testThread = "github:acme/widgets#7"

// The conformance suite of package dispatchtest against the Valkey Threads
// alone, each host its own client, as stack's Exercise runs it through the
// fleet driver.
func TestConformanceThreads(t *testing.T) {
	t.Parallel()
	dispatchtest.TestThreads(t, func(t *testing.T) dispatchtest.ThreadsHarness {
		db := livetest.Valkey(t)
		return dispatchtest.ThreadsHarness{
			Host: func(name string) dispatch.Threads {
				opts, err := redis.ParseURL(db.URL)
				require.NoError(t, err)
				client := redis.NewClient(opts)
				t.Cleanup(func() { _ = client.Close() })
				return NewThreads(client, ThreadsConfig{Host: name, StaleAfter: dispatchtest.ExerciseStaleAfter})
			},
			StaleAfter: dispatchtest.ExerciseStaleAfter,
			Wait:       time.Sleep,
		}
	})
}

func TestThreadKeysShareAHashTag(t *testing.T) {
	t.Parallel()
	h := fleet.ScopeHash(testThread)
	require.Equal(t, "thread:{"+h+"}:line", ThreadLineKey(testThread))
	require.Equal(t, "thread:{"+h+"}:seen", ThreadSeenKey(testThread))
	require.Equal(t, "thread:{"+h+"}:holder", ThreadHolderKey(testThread))
	require.NotEqual(t, ThreadLineKey(testThread), ThreadLineKey("github:acme/widgets#8"))
	for _, k := range []string{ThreadLineKey(testThread), ThreadSeenKey(testThread), ThreadHolderKey(testThread)} {
		// A cluster hashes the text between the first { and the next }.
		open := strings.IndexByte(k, '{')
		end := strings.IndexByte(k[open:], '}')
		require.Equal(t, h, k[open+1:open+end], k)
	}
}

// Every key a turn writes carries a TTL: the holder its ttl, the line and
// the seen hash three stale windows (or the ttl, when longer), so a thread
// every host abandoned disappears. Done removes the job's traces.
func TestThreadKeysExpire(t *testing.T) {
	t.Parallel()
	db := livetest.Valkey(t)
	ctx := context.Background()
	th := NewThreads(db.Client, ThreadsConfig{StaleAfter: time.Minute})
	base := time.Now().Add(-time.Minute)
	r, err := th.Turn(ctx, testThread, "gh-1", base, 10*time.Second)
	require.NoError(t, err)
	require.True(t, r.Granted)
	_, err = th.Turn(ctx, testThread, "gh-2", base.Add(time.Second), 10*time.Second)
	require.NoError(t, err)

	pttl := func(key string) time.Duration {
		d, err := db.Client.PTTL(ctx, key).Result()
		require.NoError(t, err)
		return d
	}
	require.InDelta(t, 10*time.Second, pttl(ThreadHolderKey(testThread)), float64(2*time.Second))
	require.InDelta(t, 3*time.Minute, pttl(ThreadLineKey(testThread)), float64(5*time.Second))
	require.InDelta(t, 3*time.Minute, pttl(ThreadSeenKey(testThread)), float64(5*time.Second))

	// A ttl longer than three windows makes the line outlive the holder.
	_, err = th.Turn(ctx, testThread, "gh-1", base, time.Hour)
	require.NoError(t, err)
	require.Greater(t, pttl(ThreadLineKey(testThread)), 59*time.Minute)
	require.Greater(t, pttl(ThreadHolderKey(testThread)), 59*time.Minute)

	members, err := db.Client.ZRangeWithScores(ctx, ThreadLineKey(testThread), 0, -1).Result()
	require.NoError(t, err)
	require.Equal(t, []redis.Z{{Score: float64(base.UnixMilli()), Member: "gh-1"}, {Score: float64(base.Add(time.Second).UnixMilli()), Member: "gh-2"}}, members)
	seen, err := db.Client.HGetAll(ctx, ThreadSeenKey(testThread)).Result()
	require.NoError(t, err)
	require.Len(t, seen, 2)
	for id, v := range seen {
		ms, err := strconv.ParseInt(v, 10, 64)
		require.NoError(t, err, id)
		require.InDelta(t, time.Now().UnixMilli(), ms, 5000, id)
	}

	require.NoError(t, th.Done(ctx, testThread, "gh-1"))
	require.NoError(t, th.Done(ctx, testThread, "gh-2"))
	n, err := db.Client.Exists(ctx, ThreadLineKey(testThread), ThreadSeenKey(testThread), ThreadHolderKey(testThread)).Result()
	require.NoError(t, err)
	require.Zero(t, n, "a thread whose jobs are done leaves no key")
}

// A line holds at most MaxLine jobs: one past it waits behind the line's
// first (or the holder) without joining, and is logged; it joins once there
// is room.
func TestThreadLineIsBounded(t *testing.T) {
	t.Parallel()
	db := livetest.Valkey(t)
	ctx := context.Background()
	var logs logtest.Buffer
	th := NewThreads(db.Client, ThreadsConfig{MaxLine: 3, Logger: logs.Logger(), Host: "alpha"})
	base := time.Now().Add(-time.Minute)
	for i := range 3 {
		_, err := th.Turn(ctx, testThread, fmt.Sprintf("gh-%d", i+1), base.Add(time.Duration(i)*time.Second), time.Hour)
		require.NoError(t, err)
	}
	// Older than every job of the line, yet not in it: it waits.
	r, err := th.Turn(ctx, testThread, "gh-0", base.Add(-time.Hour), time.Hour)
	require.NoError(t, err)
	require.Equal(t, dispatch.ThreadTurn{Behind: "gh-1"}, r)
	n, err := db.Client.ZCard(ctx, ThreadLineKey(testThread)).Result()
	require.NoError(t, err)
	require.EqualValues(t, 3, n)
	ok, err := db.Client.HExists(ctx, ThreadSeenKey(testThread), "gh-0").Result()
	require.NoError(t, err)
	require.False(t, ok)
	ev := logs.Events(t, "thread_line_full")
	require.Len(t, ev, 1)
	require.Equal(t, "gh-0", ev[0]["jobId"])
	require.Equal(t, "alpha", ev[0]["host"])

	// The holder asking again is served though the line is full.
	r, err = th.Turn(ctx, testThread, "gh-1", base, time.Hour)
	require.NoError(t, err)
	require.True(t, r.Granted)
	require.NoError(t, th.Done(ctx, testThread, "gh-1"))
	r, err = th.Turn(ctx, testThread, "gh-0", base.Add(-time.Hour), time.Hour)
	require.NoError(t, err)
	require.True(t, r.Granted, "with room, the oldest job joins first and runs")
}

// What the keys hold is read again: junk another writer left never decides
// more than "wait", and never blocks a thread for good.
func TestThreadHostileValuesOnlyMakeJobsWait(t *testing.T) {
	t.Parallel()
	db := livetest.Valkey(t)
	ctx := context.Background()
	var logs logtest.Buffer
	th := NewThreads(db.Client, ThreadsConfig{StaleAfter: time.Minute, Logger: logs.Logger()})
	base := time.Now().Add(-time.Minute)
	line, seen, holder := ThreadLineKey(testThread), ThreadSeenKey(testThread), ThreadHolderKey(testThread)

	// A holder that is no job id, without expiry: the job waits behind no
	// name, and the holder gets an expiry.
	require.NoError(t, db.Client.Set(ctx, holder, "gh-\x1b[2J", 0).Err())
	r, err := th.Turn(ctx, testThread, "gh-1", base, 5*time.Second)
	require.NoError(t, err)
	require.Equal(t, dispatch.ThreadTurn{}, r)
	require.Equal(t, 1, logs.Count(t, "thread_unreadable"))
	d, err := db.Client.PTTL(ctx, holder).Result()
	require.NoError(t, err)
	require.Greater(t, d, time.Duration(0))
	require.LessOrEqual(t, d, 5*time.Second)
	require.NoError(t, db.Client.Del(ctx, holder).Err())

	// A seen value that is no number, or one ahead of the clock, counts as
	// an ask now: the job is not dropped, it is rewritten, and it stays
	// first in line.
	for _, junk := range []string{"soon", "-5", "1e300", strconv.FormatInt(time.Now().Add(time.Hour).UnixMilli(), 10), ""} {
		require.NoError(t, db.Client.Del(ctx, line, seen, holder).Err())
		require.NoError(t, db.Client.ZAdd(ctx, line, redis.Z{Score: float64(base.UnixMilli()), Member: "gh-old"}).Err())
		if junk != "" {
			require.NoError(t, db.Client.HSet(ctx, seen, "gh-old", junk).Err())
		}
		r, err := th.Turn(ctx, testThread, "gh-1", base.Add(time.Second), time.Minute)
		require.NoError(t, err, junk)
		require.Equal(t, dispatch.ThreadTurn{Behind: "gh-old"}, r, "seen %q", junk)
		v, err := db.Client.HGet(ctx, seen, "gh-old").Result()
		require.NoError(t, err, junk)
		ms, err := strconv.ParseInt(v, 10, 64)
		require.NoError(t, err, junk)
		require.InDelta(t, time.Now().UnixMilli(), ms, 5000, "seen %q is rewritten to now", junk)
	}

	// A line member that is no job id is waited behind under no name, and
	// dropped once stale like any other.
	require.NoError(t, db.Client.Del(ctx, line, seen, holder).Err())
	require.NoError(t, db.Client.ZAdd(ctx, line, redis.Z{Score: 0, Member: "bad\nid"}).Err())
	r, err = th.Turn(ctx, testThread, "gh-1", base, time.Minute)
	require.NoError(t, err)
	require.Equal(t, dispatch.ThreadTurn{}, r)
	short := th.WithStaleAfter(200 * time.Millisecond)
	time.Sleep(300 * time.Millisecond)
	r, err = short.Turn(ctx, testThread, "gh-1", base, time.Minute)
	require.NoError(t, err)
	require.True(t, r.Granted)

	// A key of another type is an error (the job waits), and gets an expiry
	// when it has none, so it cannot block the thread for good.
	for _, key := range []string{line, seen, holder} {
		require.NoError(t, db.Client.Del(ctx, line, seen, holder).Err())
		require.NoError(t, db.Client.RPush(ctx, key, "x").Err())
		_, err := th.Turn(ctx, testThread, "gh-1", base, time.Minute)
		require.ErrorIs(t, err, ErrThreadsUnavailable, key)
		require.ErrorContains(t, err, key)
		d, err := db.Client.PTTL(ctx, key).Result()
		require.NoError(t, err)
		require.Greater(t, d, time.Duration(0), key)
		require.NoError(t, th.Done(ctx, testThread, "gh-1"), "Done leaves a key of another type alone")
		ty, err := db.Client.Type(ctx, key).Result()
		require.NoError(t, err)
		require.Equal(t, "list", ty)
	}
}

// Valkey not answering is an error, never a turn: the caller defers the job.
// Reachability is logged once per transition, with the host.
func TestThreadsValkeyDown(t *testing.T) {
	t.Parallel()
	srv := livetest.StartServer(t)
	ctx := context.Background()
	var logs logtest.Buffer
	th := NewThreads(srv.Client(), ThreadsConfig{CallTimeout: 300 * time.Millisecond, Logger: logs.Logger(), Host: "alpha"})
	r, err := th.Turn(ctx, testThread, "gh-1", time.Now(), time.Minute)
	require.NoError(t, err)
	require.True(t, r.Granted)
	srv.Stop()
	for range 2 {
		r, err = th.Turn(ctx, testThread, "gh-2", time.Now(), time.Minute)
		require.ErrorIs(t, err, ErrThreadsUnavailable)
		require.False(t, r.Granted)
		require.ErrorIs(t, th.Done(ctx, testThread, "gh-1"), ErrThreadsUnavailable)
	}
	require.Equal(t, 1, logs.Count(t, "threads_unreachable"))
	require.Contains(t, logs.String(), `"host":"alpha"`)
	require.NoError(t, th.Close(ctx))
}

// A zero enqueue time is the server's now: the job lines up behind what is
// there, never ahead of it.
func TestThreadZeroEnqueueTimeIsNow(t *testing.T) {
	t.Parallel()
	db := livetest.Valkey(t)
	ctx := context.Background()
	th := NewThreads(db.Client, ThreadsConfig{})
	_, err := th.Turn(ctx, testThread, "gh-h", time.Now().Add(-time.Hour), time.Minute)
	require.NoError(t, err)
	_, err = th.Turn(ctx, testThread, "gh-2", time.Now().Add(-time.Minute), time.Minute)
	require.NoError(t, err)
	_, err = th.Turn(ctx, testThread, "gh-zero", time.Time{}, time.Minute)
	require.NoError(t, err)
	require.NoError(t, th.Done(ctx, testThread, "gh-h"))
	r, err := th.Turn(ctx, testThread, "gh-zero", time.Time{}, time.Minute)
	require.NoError(t, err)
	require.Equal(t, dispatch.ThreadTurn{Behind: "gh-2"}, r)
	s, err := db.Client.ZScore(ctx, ThreadLineKey(testThread), "gh-zero").Result()
	require.NoError(t, err)
	require.InDelta(t, float64(time.Now().UnixMilli()), s, 5000)
}

// With a settle window, the line's first job waits (behind itself) until it
// was enqueued that long ago; a job enqueued a moment earlier that asks
// within the window goes first.
func TestThreadSettleKeepsEnqueueOrder(t *testing.T) {
	t.Parallel()
	db := livetest.Valkey(t)
	th := NewThreads(db.Client, ThreadsConfig{Settle: 800 * time.Millisecond})
	ctx := t.Context()
	const thread = "github:acme/widgets#9"
	newer := time.Now()
	older := newer.Add(-50 * time.Millisecond)
	r, err := th.Turn(ctx, thread, "gh-new", newer, time.Hour)
	require.NoError(t, err)
	require.False(t, r.Granted)
	require.Equal(t, "gh-new", r.Behind, "settling")
	r, err = th.Turn(ctx, thread, "gh-old", older, time.Hour)
	require.NoError(t, err)
	require.False(t, r.Granted)
	require.Eventually(t, func() bool {
		r, err := th.Turn(ctx, thread, "gh-old", older, time.Hour)
		return err == nil && r.Granted
	}, 30*time.Second, 50*time.Millisecond, "past the window the older job takes the thread")
	r, err = th.Turn(ctx, thread, "gh-new", newer, time.Hour)
	require.NoError(t, err)
	require.False(t, r.Granted)
	require.Equal(t, "gh-old", r.Behind)
}
