package queue_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/queue"
)

func TestQueue_FetchCompleteRecordsResult(t *testing.T) {
	t.Parallel()
	db, q := setup(t, queue.Config{WorkerName: "w1"})
	ctx := testCtx(t)
	id := add(t, q, queue.AddOptions{})
	empty, err := q.Fetch(ctx, "")
	require.ErrorIs(t, err, queue.ErrInvalidOption, "a token is required")
	require.Nil(t, empty)

	job := fetch(t, q, "tok")
	require.Equal(t, id, job.ID)
	require.Equal(t, "tok", job.Token)
	require.Equal(t, 1, job.AttemptsStarted)
	require.Equal(t, "w1", job.ProcessedBy)
	require.WithinDuration(t, serverNow(t, db), job.ProcessedOn, 2*time.Second)
	lock, err := db.Client.Get(ctx, "bull:pi-jobs:"+id+":lock").Result()
	require.NoError(t, err)
	require.Equal(t, "tok", lock, "BullMQ's lock key holds the token")

	nothing, err := q.Fetch(ctx, "tok2")
	require.NoError(t, err)
	require.Nil(t, nothing)

	require.NoError(t, q.Complete(ctx, id, "tok", json.RawMessage(`{"cost":1.5}`)))
	got, err := q.Get(ctx, id)
	require.NoError(t, err)
	require.Equal(t, queue.StateCompleted, got.State)
	require.JSONEq(t, `{"cost":1.5}`, string(got.ReturnValue))
	require.Equal(t, 1, got.AttemptsMade)
	require.False(t, got.FinishedOn.IsZero())
	require.ErrorIs(t, q.Complete(ctx, id, "tok", nil), queue.ErrLockLost, "a finished job cannot be completed twice")
	require.ErrorIs(t, q.Complete(ctx, id, "tok", json.RawMessage(`{x`)), queue.ErrInvalidOption)
}

// A take returns the job's fields as read and applies its own writes on
// the Go side: the job it returns must match the stored hash, through
// Fetch and through CompleteAndFetch, with and without a worker name.
func TestTake_ReturnedJobMatchesStoredJob(t *testing.T) {
	t.Parallel()
	db, named := setup(t, queue.Config{WorkerName: "w1"})
	unnamed, err := queue.New(db.Client, fleet.SharedQueue, queue.Config{})
	require.NoError(t, err)
	ctx := testCtx(t)
	same := func(t *testing.T, got *queue.Job) {
		t.Helper()
		stored, err := named.Get(ctx, got.ID)
		require.NoError(t, err)
		require.Equal(t, stored.ProcessedOn, got.ProcessedOn, "processedOn")
		require.False(t, got.ProcessedOn.IsZero())
		require.Equal(t, stored.AttemptsStarted, got.AttemptsStarted, "ats")
		require.Equal(t, stored.ProcessedBy, got.ProcessedBy, "pb")
		require.Equal(t, stored.AttemptsMade, got.AttemptsMade, "atm")
	}

	a := add(t, named, queue.AddOptions{})
	b := add(t, named, queue.AddOptions{})
	first := fetch(t, named, "ta")
	require.Equal(t, a, first.ID)
	require.Equal(t, 1, first.AttemptsStarted)
	require.Equal(t, "w1", first.ProcessedBy)
	same(t, first)

	// a goes back (a deferral, not an attempt); the unnamed queue takes b,
	// then a again through CompleteAndFetch: a keeps w1 as its pb, since a
	// take without a worker name does not write one.
	require.NoError(t, named.Defer(ctx, a, "ta", time.Millisecond))
	second := fetch(t, unnamed, "tb")
	require.Equal(t, b, second.ID)
	require.Equal(t, "", second.ProcessedBy)
	same(t, second)
	time.Sleep(5 * time.Millisecond)
	again, err := unnamed.CompleteAndFetch(ctx, b, "tb", nil, "ta2")
	require.NoError(t, err)
	require.NotNil(t, again)
	require.Equal(t, a, again.ID)
	require.Equal(t, 2, again.AttemptsStarted)
	require.Equal(t, "w1", again.ProcessedBy)
	require.Equal(t, "ta2", again.Token)
	same(t, again)
	require.NoError(t, unnamed.Complete(ctx, a, "ta2", nil))

	// Every field a take reads, written by a peer, comes back as Get reads
	// it (the take's own writes aside).
	c := add(t, named, queue.AddOptions{Attempts: 3})
	require.NoError(t, db.Client.HSet(ctx, "bull:pi-jobs:"+c,
		"deid", "d1", "priority", "0", "atm", "1", "attemptsMade", "1", "ats", "4", "stc", "2",
		"processedOn", "1700000000000", "finishedOn", "1700000000500", "delay", "0",
		"failedReason", "boom", "returnvalue", `{"r":1}`, "pb", "old", "defa", "", "extra", "x").Err())
	taken := fetch(t, named, "tc")
	require.Equal(t, c, taken.ID)
	stored, err := named.Get(ctx, c)
	require.NoError(t, err)
	require.Equal(t, 5, taken.AttemptsStarted)
	require.Equal(t, "w1", taken.ProcessedBy)
	require.Equal(t, "boom", taken.FailedReason)
	require.JSONEq(t, `{"r":1}`, string(taken.ReturnValue))
	taken.Token, stored.State = "", ""
	require.Equal(t, stored, taken, "a take returns the job as stored")
}

func TestQueue_CompleteAndFetchTakesNextInSameCall(t *testing.T) {
	t.Parallel()
	_, q := setup(t, queue.Config{})
	ctx := testCtx(t)
	a := add(t, q, queue.AddOptions{})
	b := add(t, q, queue.AddOptions{})
	require.Equal(t, a, fetch(t, q, "t1").ID)
	next, err := q.CompleteAndFetch(ctx, a, "t1", nil, "t2")
	require.NoError(t, err)
	require.NotNil(t, next)
	require.Equal(t, b, next.ID)
	require.Equal(t, "t2", next.Token)
	none, err := q.CompleteAndFetch(ctx, b, "t2", nil, "t3")
	require.NoError(t, err)
	require.Nil(t, none)
	require.Equal(t, queue.Counts{Completed: 2}, counts(t, q))
}

func TestQueue_DelayedPromotedByServerTime(t *testing.T) {
	t.Parallel()
	_, q := setup(t, queue.Config{})
	ctx := testCtx(t)
	id := add(t, q, queue.AddOptions{Delay: 250 * time.Millisecond})
	require.Equal(t, queue.StateDelayed, state(t, q, id))
	early, err := q.Fetch(ctx, "t")
	require.NoError(t, err)
	require.Nil(t, early, "not due yet")

	time.Sleep(300 * time.Millisecond)
	job := fetch(t, q, "t")
	require.Equal(t, id, job.ID)
	require.GreaterOrEqual(t, job.ProcessedOn.Sub(job.Timestamp), 250*time.Millisecond)
	require.Equal(t, time.Duration(0), job.Delay, "promotion resets delay as BullMQ does")
}

func TestQueue_AttemptsWithExponentialBackoff(t *testing.T) {
	t.Parallel()
	_, q := setup(t, queue.Config{})
	ctx := testCtx(t)
	backoff := queue.Backoff{Type: queue.BackoffExponential, Delay: 100 * time.Millisecond}
	id := add(t, q, queue.AddOptions{Attempts: 3, Backoff: backoff})

	for attempt := 1; attempt <= 2; attempt++ {
		var job *queue.Job
		require.Eventually(t, func() bool {
			var err error
			job, err = q.Fetch(ctx, "t")
			require.NoError(t, err)
			return job != nil
		}, 2*time.Second, 10*time.Millisecond)
		require.Equal(t, id, job.ID)
		retried, err := q.Fail(ctx, id, "t", "infra", queue.FailOptions{})
		require.NoError(t, err)
		require.True(t, retried, "attempt %d of 3 is retried", attempt)
		got, err := q.Get(ctx, id)
		require.NoError(t, err)
		require.Equal(t, queue.StateDelayed, got.State)
		require.Equal(t, attempt, got.AttemptsMade)
		require.Equal(t, "infra", got.FailedReason)
		require.Equal(t, backoff.DelayFor(attempt), got.Delay, "delay*2^(attemptsMade-1), as BullMQ")
	}
	require.Equal(t, 200*time.Millisecond, backoff.DelayFor(2))

	require.Eventually(t, func() bool {
		job, err := q.Fetch(ctx, "t")
		require.NoError(t, err)
		return job != nil
	}, 2*time.Second, 10*time.Millisecond)
	retried, err := q.Fail(ctx, id, "t", "infra again", queue.FailOptions{})
	require.NoError(t, err)
	require.False(t, retried, "the last attempt fails for good")
	got, err := q.Get(ctx, id)
	require.NoError(t, err)
	require.Equal(t, queue.StateFailed, got.State)
	require.Equal(t, 3, got.AttemptsMade)
	require.Equal(t, "infra again", got.FailedReason)
}

func TestQueue_FailWithoutBackoffRetriesAtOnce(t *testing.T) {
	t.Parallel()
	_, q := setup(t, queue.Config{})
	ctx := testCtx(t)
	id := add(t, q, queue.AddOptions{Attempts: 2})
	fetch(t, q, "t")
	retried, err := q.Fail(ctx, id, "t", "x", queue.FailOptions{})
	require.NoError(t, err)
	require.True(t, retried)
	require.Equal(t, queue.StateWaiting, state(t, q, id))

	fetch(t, q, "t")
	noRetry := add(t, q, queue.AddOptions{Attempts: 5})
	retried, err = q.Fail(ctx, id, "t", "x", queue.FailOptions{})
	require.NoError(t, err)
	require.False(t, retried)
	fetch(t, q, "t")
	retried, err = q.Fail(ctx, noRetry, "t", "policy", queue.FailOptions{NoRetry: true})
	require.NoError(t, err)
	require.False(t, retried, "NoRetry fails for good with attempts left")
	require.Equal(t, queue.StateFailed, state(t, q, noRetry))
}

func TestQueue_DeferIsNotAnAttempt(t *testing.T) {
	t.Parallel()
	_, q := setup(t, queue.Config{})
	ctx := testCtx(t)
	id := add(t, q, queue.AddOptions{Attempts: 2})
	fetch(t, q, "t")
	require.ErrorIs(t, q.Defer(ctx, id, "t", -time.Second), queue.ErrInvalidOption)
	require.ErrorIs(t, q.Defer(ctx, id, "other", time.Second), queue.ErrLockLost)
	require.NoError(t, q.Defer(ctx, id, "t", 100*time.Millisecond))
	got, err := q.Get(ctx, id)
	require.NoError(t, err)
	require.Equal(t, queue.StateDelayed, got.State)
	require.Equal(t, 0, got.AttemptsMade)
	require.Equal(t, 100*time.Millisecond, got.Delay)

	time.Sleep(150 * time.Millisecond)
	job := fetch(t, q, "t2")
	require.Equal(t, id, job.ID)
	require.Equal(t, 0, job.AttemptsMade)
	require.Equal(t, 2, job.AttemptsStarted)
	require.NoError(t, q.Complete(ctx, id, "t2", nil))
	got, err = q.Get(ctx, id)
	require.NoError(t, err)
	require.Equal(t, 1, got.AttemptsMade)
}

// A deferral's note stays on the job for the next take; a deferral
// without one keeps it.
func TestQueue_DeferNotedKeepsTheNote(t *testing.T) {
	t.Parallel()
	_, q := setup(t, queue.Config{})
	ctx := testCtx(t)
	id := add(t, q, queue.AddOptions{})
	fetch(t, q, "t")
	require.ErrorIs(t, q.DeferNoted(ctx, id, "t", 0, strings.Repeat("x", queue.MaxNoteBytes+1)), queue.ErrInvalidOption)
	require.NoError(t, q.DeferNoted(ctx, id, "t", time.Millisecond, `{"a":1}`))
	time.Sleep(20 * time.Millisecond)
	job := fetch(t, q, "t2")
	require.Equal(t, `{"a":1}`, job.GateWaits)
	require.NoError(t, q.Defer(ctx, id, "t2", time.Millisecond))
	time.Sleep(20 * time.Millisecond)
	job = fetch(t, q, "t3")
	require.Equal(t, `{"a":1}`, job.GateWaits)
	got, err := q.Get(ctx, id)
	require.NoError(t, err)
	require.Equal(t, `{"a":1}`, got.GateWaits)
}

func TestQueue_StalledJobFailsAndIsReported(t *testing.T) {
	t.Parallel()
	_, q := setup(t, queue.Config{LockTTL: 100 * time.Millisecond})
	ctx := testCtx(t)
	id := add(t, q, queue.AddOptions{Attempts: 3})
	live := add(t, q, queue.AddOptions{})
	fetch(t, q, "dead")
	st, err := q.CheckStalled(ctx)
	require.NoError(t, err)
	require.Empty(t, st.Failed, "a locked job is not stalled")

	time.Sleep(150 * time.Millisecond)
	fetch(t, q, "alive") // the second job, freshly locked
	st, err = q.CheckStalled(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{id}, st.Failed, "max stalled count 0: the first stall fails, attempts or not")
	require.Empty(t, st.Requeued)
	got, err := q.Get(ctx, id)
	require.NoError(t, err)
	require.Equal(t, queue.StateFailed, got.State)
	require.Equal(t, "stalled", got.FailedReason)
	require.Equal(t, 1, got.StalledCount)
	require.ErrorIs(t, q.Complete(ctx, id, "dead", nil), queue.ErrLockLost, "the stalled consumer cannot report")
	require.Equal(t, queue.StateActive, state(t, q, live))
}

func TestQueue_StalledRequeuedUpToMax(t *testing.T) {
	t.Parallel()
	_, q := setup(t, queue.Config{LockTTL: 80 * time.Millisecond, MaxStalledCount: 1})
	ctx := testCtx(t)
	id := add(t, q, queue.AddOptions{})
	add(t, q, queue.AddOptions{}) // queued behind it
	fetch(t, q, "a")
	time.Sleep(120 * time.Millisecond)
	st, err := q.CheckStalled(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{id}, st.Requeued)
	require.Equal(t, id, fetch(t, q, "b").ID, "a requeued job goes to the front")
	time.Sleep(120 * time.Millisecond)
	st, err = q.CheckStalled(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{id}, st.Failed)
}

func TestQueue_ExtendLockAndLostLock(t *testing.T) {
	t.Parallel()
	_, q := setup(t, queue.Config{LockTTL: 150 * time.Millisecond})
	ctx := testCtx(t)
	id := add(t, q, queue.AddOptions{})
	fetch(t, q, "mine")
	require.ErrorIs(t, q.ExtendLock(ctx, id, "theirs", time.Second), queue.ErrLockLost)
	require.NoError(t, q.ExtendLock(ctx, id, "mine", time.Second))
	time.Sleep(200 * time.Millisecond)
	st, err := q.CheckStalled(ctx)
	require.NoError(t, err)
	require.Empty(t, st.Failed, "an extended lock outlives the configured TTL")

	require.ErrorIs(t, q.Complete(ctx, id, "theirs", nil), queue.ErrLockLost)
	_, err = q.Fail(ctx, id, "theirs", "x", queue.FailOptions{})
	require.ErrorIs(t, err, queue.ErrLockLost)
	require.Equal(t, queue.StateActive, state(t, q, id), "a refused report changes nothing")
	require.NoError(t, q.Complete(ctx, id, "mine", nil))

	lost := add(t, q, queue.AddOptions{})
	fetch(t, q, "slow")
	time.Sleep(200 * time.Millisecond)
	require.ErrorIs(t, q.ExtendLock(ctx, lost, "slow", time.Second), queue.ErrLockLost, "an expired lock cannot be extended")
}

// scriptCalls counts the script calls a client sends.
type scriptCalls struct{ n atomic.Int64 }

func (h *scriptCalls) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *scriptCalls) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h *scriptCalls) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if name := cmd.Name(); name == "evalsha" || name == "eval" {
			h.n.Add(1)
		}
		return next(ctx, cmd)
	}
}

func TestQueue_ConcurrentCompletionsShareCalls(t *testing.T) {
	t.Parallel()
	db := livetest.Valkey(t)
	opts, err := redis.ParseURL(db.URL)
	require.NoError(t, err)
	client := redis.NewClient(opts)
	defer client.Close()
	calls := &scriptCalls{}
	client.AddHook(calls)
	q, err := queue.New(client, fleet.SharedQueue, queue.Config{})
	require.NoError(t, err)
	ctx := testCtx(t)
	const jobs, slots = 400, 16
	for range jobs {
		add(t, q, queue.AddOptions{})
	}
	calls.n.Store(0)
	var mu sync.Mutex
	seen := map[string]int{}
	var wg sync.WaitGroup
	for range slots {
		wg.Go(func() {
			job, err := q.Fetch(ctx, queue.NewToken())
			for err == nil && job != nil {
				mu.Lock()
				seen[job.ID]++
				mu.Unlock()
				job, err = q.CompleteAndFetch(ctx, job.ID, job.Token, json.RawMessage(`{"ok":true}`), queue.NewToken())
			}
			assert.NoError(t, err)
		})
	}
	wg.Wait()
	require.Len(t, seen, jobs)
	for id, n := range seen {
		require.Equal(t, 1, n, "job %s taken %d times", id, n)
	}
	require.Equal(t, queue.Counts{Completed: jobs}, counts(t, q))
	completeCalls := calls.n.Load() - slots // the first fetches
	t.Logf("%d completions in %d script calls", jobs, completeCalls)
	require.Less(t, completeCalls, int64(jobs), "concurrent completions share script calls")
	job, err := q.Get(ctx, "1")
	require.NoError(t, err)
	require.JSONEq(t, `{"ok":true}`, string(job.ReturnValue))
}

// Completions add their events uncapped and cap the stream once per call
// (as BullMQ caps once per completion): under concurrent completions the
// stream still stays near the cap, and the newest events are kept.
func TestCompleteAndFetch_EventsStreamStaysCapped(t *testing.T) {
	t.Parallel()
	db, q := setup(t, queue.Config{})
	ctx := testCtx(t)
	const maxLen, jobs, slots = 50, 600, 8
	require.NoError(t, db.Client.HSet(ctx, "bull:pi-jobs:meta", "opts.maxLenEvents", maxLen).Err())
	for range jobs {
		add(t, q, queue.AddOptions{})
	}
	var wg sync.WaitGroup
	var done atomic.Int64
	for s := range slots {
		wg.Go(func() {
			job, err := q.Fetch(ctx, fmt.Sprintf("slot-%d-0", s))
			for n := 1; err == nil && job != nil; n++ {
				job, err = q.CompleteAndFetch(ctx, job.ID, job.Token, nil, fmt.Sprintf("slot-%d-%d", s, n))
				done.Add(1)
			}
			assert.NoError(t, err)
		})
	}
	wg.Wait()
	require.EqualValues(t, jobs, done.Load())

	// 4 events per job were written. Approximate trimming drops whole
	// stream nodes (100 entries each by default), so up to about a node
	// more than the cap may remain, plus the events of the last call.
	n, err := db.Client.XLen(ctx, "bull:pi-jobs:events").Result()
	require.NoError(t, err)
	require.GreaterOrEqual(t, n, int64(maxLen))
	require.Less(t, n, int64(maxLen+100+4*slots), "the events stream was not capped")
	last, err := db.Client.XRevRangeN(ctx, "bull:pi-jobs:events", "+", "-", 1).Result()
	require.NoError(t, err)
	require.Len(t, last, 1)
	require.Equal(t, "completed", last[0].Values["event"])
}

// BenchmarkCompleteAndFetch drains b.N jobs with 16 slots completing and
// taking through one Queue, as a worker's slots do. Its allocs/op are the
// client's allocations per job (go test -bench CompleteAndFetch -benchmem
// ./queue/, with VALKEY_TEST_URL set).
func BenchmarkCompleteAndFetch(b *testing.B) {
	db := livetest.Valkey(b)
	q, err := queue.New(db.Client, fleet.SharedQueue, queue.Config{WorkerName: "bench"})
	require.NoError(b, err)
	ctx := context.Background()
	for i := range b.N {
		if _, _, err := q.Add(ctx, "noop", json.RawMessage(fmt.Sprintf(`{"i":%d}`, i)), queue.AddOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			job, err := q.Fetch(ctx, queue.NewToken())
			for err == nil && job != nil {
				job, err = q.CompleteAndFetch(ctx, job.ID, job.Token, nil, queue.NewToken())
			}
			if err != nil {
				b.Error(err)
			}
		})
	}
	wg.Wait()
}
