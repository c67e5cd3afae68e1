package queue_test

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/queue"
)

// twoQueues returns the shared queue and a host queue in one database.
func twoQueues(t *testing.T, db *livetest.ValkeyDB) (*queue.Queue, *queue.Queue) {
	t.Helper()
	a, err := queue.New(db.Client, fleet.SharedQueue, queue.Config{})
	require.NoError(t, err)
	b, err := queue.New(db.Client, fleet.HostQueueName("w1"), queue.Config{})
	require.NoError(t, err)
	return a, b
}

type taken struct {
	q   *queue.Queue
	job *queue.Job
	at  time.Time
	err error
}

// consume runs c.Next in a goroutine until ctx ends, sending every result;
// the returned wait function waits for the goroutine to exit.
func consume(ctx context.Context, c *queue.Consumer) (<-chan taken, func()) {
	out := make(chan taken, 100)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			q, job, err := c.Next(ctx, queue.NewToken())
			out <- taken{q: q, job: job, at: time.Now(), err: err}
			if err != nil {
				return
			}
		}
	}()
	return out, wg.Wait
}

// The blocking fetch sleeps on both queues at once and an Add wakes it: with
// a minute's block timeout, a consumer that polled or slept past the Add
// would miss the 30 s guard. Pickup latency itself is the benchmarks' claim
// (test/bench/queuebench, docs/benchmarks.md), never a timed unit test's.
func TestConsumer_BlockingFetchWakesOnTheAdd(t *testing.T) {
	t.Parallel()
	db := livetest.Valkey(t)
	a, b := twoQueues(t, db)
	c, err := queue.NewConsumer([]*queue.Queue{a, b}, queue.ConsumerConfig{BlockTimeout: time.Minute})
	require.NoError(t, err)
	defer c.Close()
	ctx, cancel := context.WithCancel(testCtx(t))
	results, wait := consume(ctx, c)
	defer func() { cancel(); wait() }()

	for i := range 20 {
		target := a
		if i%2 == 1 {
			target = b
		}
		time.Sleep(20 * time.Millisecond) // let the consumer go back to sleep
		id, _, err := target.Add(ctx, "run", nil, queue.AddOptions{})
		require.NoError(t, err)
		select {
		case got := <-results:
			require.NoError(t, got.err)
			require.Equal(t, id, got.job.ID)
			require.Equal(t, target.Name(), got.q.Name(), "one BZPOPMIN sleeps on both queues")
		case <-time.After(30 * time.Second):
			t.Fatalf("add %d did not wake the consumer", i)
		}
	}
}

func TestConsumer_ServesQueuesRoundRobin(t *testing.T) {
	t.Parallel()
	db := livetest.Valkey(t)
	a, b := twoQueues(t, db)
	for range 3 {
		add(t, a, queue.AddOptions{})
		add(t, b, queue.AddOptions{})
	}
	c, err := queue.NewConsumer([]*queue.Queue{a, b}, queue.ConsumerConfig{})
	require.NoError(t, err)
	defer c.Close()
	var order []string
	for range 6 {
		q, _, err := c.Next(testCtx(t), "t")
		require.NoError(t, err)
		order = append(order, q.Name())
	}
	require.Equal(t, []string{"pi-jobs", "pi-jobs@w1", "pi-jobs", "pi-jobs@w1", "pi-jobs", "pi-jobs@w1"}, order)
}

func TestWaitAny_WakesOnEitherQueue(t *testing.T) {
	t.Parallel()
	db := livetest.Valkey(t)
	a, b := twoQueues(t, db)
	ctx := testCtx(t)

	start := time.Now()
	q, err := queue.WaitAny(ctx, db.Client, 150*time.Millisecond, a, b)
	require.NoError(t, err)
	require.Nil(t, q, "timeout")
	require.GreaterOrEqual(t, time.Since(start), 140*time.Millisecond)

	done := make(chan *queue.Queue, 1)
	go func() {
		q, err := queue.WaitAny(ctx, db.Client, time.Minute, a, b)
		if err != nil {
			q = nil
		}
		done <- q
	}()
	time.Sleep(50 * time.Millisecond)
	add(t, b, queue.AddOptions{})
	// Woken by the add, not by its own minute's timeout (which returns nil).
	select {
	case q := <-done:
		require.NotNil(t, q, "WaitAny timed out instead of waking")
		require.Equal(t, b.Name(), q.Name())
	case <-time.After(30 * time.Second):
		t.Fatal("WaitAny did not wake")
	}
	require.NotNil(t, fetch(t, b, "t"))
}

func TestConsumer_DelayedJobsFollowServerTimeUnderSkew(t *testing.T) {
	t.Parallel()
	for _, skew := range []time.Duration{5 * time.Hour, -5 * time.Hour} {
		t.Run(fmt.Sprintf("Skew%s", skew), func(t *testing.T) {
			t.Parallel()
			_, q := setup(t, queue.Config{})
			c, err := queue.NewConsumer([]*queue.Queue{q}, queue.ConsumerConfig{
				NowFunc: func() time.Time { return time.Now().Add(skew) },
			})
			require.NoError(t, err)
			defer c.Close()
			ctx, cancel := context.WithCancel(testCtx(t))
			results, wait := consume(ctx, c)
			defer func() { cancel(); wait() }()
			time.Sleep(50 * time.Millisecond) // the consumer is asleep

			const delay = 300 * time.Millisecond
			start := time.Now()
			id := add(t, q, queue.AddOptions{Delay: delay})
			got := <-results
			elapsed := got.at.Sub(start)
			require.NoError(t, got.err)
			require.Equal(t, id, got.job.ID)
			onServer := got.job.ProcessedOn.Sub(got.job.Timestamp)
			t.Logf("clock %v off: taken after %v (server %v)", skew, elapsed, onServer)
			// Never early by the server's clock, and never hours late by the
			// local one: a skewed clock would wait 5 hours. The bounds catch
			// that, not a slow machine (latency is the benchmarks' to claim).
			require.GreaterOrEqual(t, onServer, delay, "never early by the server's clock")
			require.Less(t, onServer, delay+10*time.Second, "on time by the server's clock")
			require.Less(t, elapsed, delay+10*time.Second)
		})
	}
}

func TestConsumer_CancelReturnsPromptlyAndLeavesNoGoroutine(t *testing.T) {
	// Not parallel: it counts goroutines.
	db := livetest.Valkey(t)
	a, b := twoQueues(t, db)
	baseline := runtime.NumGoroutine()

	c, err := queue.NewConsumer([]*queue.Queue{a, b}, queue.ConsumerConfig{BlockTimeout: time.Minute})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, _, err := c.Next(ctx, "t")
		done <- err
	}()
	time.Sleep(100 * time.Millisecond) // asleep on the markers
	cancel()
	select {
	case err := <-done:
		require.ErrorIs(t, err, context.Canceled, "cancel interrupts the wait")
	case <-time.After(30 * time.Second): // the wait itself is a minute
		t.Fatal("Next ignored cancellation")
	}
	require.NoError(t, c.Close())
	_, _, err = c.Next(context.Background(), "t")
	require.ErrorIs(t, err, queue.ErrConsumerClosed)

	// The connection the wait used is reusable: the pool still works.
	require.NoError(t, db.Client.Ping(context.Background()).Err())
	deadline := time.Now().Add(2 * time.Second)
	for runtime.NumGoroutine() > baseline && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	require.LessOrEqual(t, runtime.NumGoroutine(), baseline, "no goroutine outlives Next and Close")
}

// countingHook records every command a client sends (pipelines
// included), as the client issues them.
type countingHook struct {
	mu   sync.Mutex
	cmds []string
}

func (h *countingHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *countingHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.record(cmd)
		return next(ctx, cmd)
	}
}

func (h *countingHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.record(cmds...)
		return next(ctx, cmds)
	}
}

func (h *countingHook) record(cmds ...redis.Cmder) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, c := range cmds {
		h.cmds = append(h.cmds, c.Name())
	}
}

func (h *countingHook) take() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := h.cmds
	h.cmds = nil
	return out
}

func TestConsumer_IdleIssuesAboutOneCommandPerSecond(t *testing.T) {
	t.Parallel()
	// A private server: INFO commandstats there counts this consumer's
	// commands and no other test's.
	srv := livetest.StartServer(t)
	admin := srv.Client() // INFO only
	client := srv.Client()
	// Two pooled connections, as a consumer has after its first pass: one
	// it holds to wait on, one its fetches use. Otherwise the second is
	// dialled at the first fetch after a wait, inside the window.
	var warm []*redis.Conn
	for range 2 {
		conn := client.Conn()
		require.NoError(t, conn.Ping(testCtx(t)).Err())
		warm = append(warm, conn)
	}
	for _, conn := range warm {
		require.NoError(t, conn.Close())
	}
	hook := &countingHook{}
	client.AddHook(hook)
	a, err := queue.New(client, fleet.SharedQueue, queue.Config{})
	require.NoError(t, err)
	b, err := queue.New(client, fleet.HostQueueName("w1"), queue.Config{})
	require.NoError(t, err)
	c, err := queue.NewConsumer([]*queue.Queue{a, b}, queue.ConsumerConfig{})
	require.NoError(t, err)
	defer c.Close()
	ctx, cancel := context.WithCancel(testCtx(t))
	results, wait := consume(ctx, c)
	defer func() { cancel(); wait() }()

	// Start-up is not idle cost: connection setup, the first fetch of each
	// queue (EVALSHA, then EVAL on the fresh server) and CLIENT ID for the
	// blocking connection happen once. Measure from the first BZPOPMIN on.
	var startup []string
	require.Eventually(t, func() bool {
		startup = append(startup, hook.take()...)
		return slices.Contains(startup, "bzpopmin")
	}, 5*time.Second, 5*time.Millisecond, "the consumer goes to sleep on the markers")
	time.Sleep(50 * time.Millisecond) // the BZPOPMIN reaches the server
	startup = append(startup, hook.take()...)
	before := commandCalls(t, admin) // also sets up admin's connection

	const window = 6 * time.Second
	time.Sleep(window)
	after := commandCalls(t, admin)
	sent := hook.take()
	ran := callsBetween(before, after)

	// commandstats also counts the commands a script runs. Calibrate what
	// one idle pass (a fetch of each empty queue) runs inside its scripts,
	// and count a script call as one command.
	calBefore := commandCalls(t, admin)
	require.Nil(t, fetchNone(t, a))
	require.Nil(t, fetchNone(t, b))
	pass := callsBetween(calBefore, commandCalls(t, admin))
	hook.take()
	require.Equal(t, int64(2), pass["evalsha"], "calibration: %v", pass)
	passes := ran["evalsha"] / 2
	received := map[string]int64{}
	total := int64(0)
	for name, n := range ran {
		if name != "evalsha" {
			n -= passes * pass[name] // run by the scripts of the idle passes
		}
		if n != 0 {
			received[name] = n
			total += n
		}
	}
	t.Logf("idle consumer of 2 queues over %v: the server received %d commands %v (ran %v with the scripts' own; one idle pass runs %v); the client sent %v (start-up: %v)",
		window, total, received, ran, pass, sent, startup)
	// In the window: the BZPOPMIN that was asleep times out after
	// BlockTimeout (5s), then one fetch per queue; the next BZPOPMIN is
	// still asleep when the window ends (a blocked command is counted when
	// it returns).
	require.GreaterOrEqual(t, total, int64(3), "the consumer is alive")
	require.LessOrEqual(t, total, int64(8), "about one command per second while idle")
	for name := range received {
		require.Contains(t, []string{"evalsha", "bzpopmin"}, name, "only fetches and the wait reach the server")
	}
	// The client's view (the hook) agrees: it also sees the BZPOPMIN still
	// asleep, and would see a command the server rejected.
	require.LessOrEqual(t, len(sent), 8)
	for _, name := range sent {
		require.Contains(t, []string{"evalsha", "bzpopmin"}, name)
	}
	select {
	case got := <-results:
		t.Fatalf("idle consumer returned %+v", got)
	default:
	}
}

// fetchNone fetches from q, which must be empty.
func fetchNone(t *testing.T, q *queue.Queue) *queue.Job {
	t.Helper()
	job, err := q.Fetch(testCtx(t), "calibration")
	require.NoError(t, err)
	return job
}

// callsBetween is after minus before, per command, leaving out INFO.
func callsBetween(before, after map[string]int64) map[string]int64 {
	out := map[string]int64{}
	for name, n := range after {
		if d := n - before[name]; name != "info" && d != 0 {
			out[name] = d
		}
	}
	return out
}

// commandCalls reads INFO commandstats: per command, the calls the server
// ran plus those it rejected before running them.
func commandCalls(t *testing.T, c *redis.Client) map[string]int64 {
	t.Helper()
	raw, err := c.Info(testCtx(t), "commandstats").Result()
	require.NoError(t, err)
	out := map[string]int64{}
	for line := range strings.SplitSeq(raw, "\n") {
		name, stats, ok := strings.Cut(strings.TrimSpace(line), ":")
		name, isStat := strings.CutPrefix(name, "cmdstat_")
		if !ok || !isStat {
			continue
		}
		for field := range strings.SplitSeq(stats, ",") {
			k, v, _ := strings.Cut(field, "=")
			if k == "calls" || k == "rejected_calls" {
				n, err := strconv.ParseInt(v, 10, 64)
				require.NoError(t, err, "INFO commandstats line %q", line)
				out[name] += n
			}
		}
	}
	require.NotEmpty(t, out, "INFO commandstats: %q", raw)
	return out
}

// A slot that completes and fetches in one call passes no wake-up on (it
// consumed none), so this checks that consumers asleep on the marker still
// get every job added while the slot keeps taking jobs, and that no job is
// taken twice.
func TestConsumer_SleepersWakeWhileASlotCompletesAndFetches(t *testing.T) {
	t.Parallel()
	_, q := setup(t, queue.Config{})
	ctx, cancel := context.WithCancel(testCtx(t))
	add(t, q, queue.AddOptions{})
	cur := fetch(t, q, "slot")

	var results []<-chan taken
	var waits []func()
	for range 2 {
		c, err := queue.NewConsumer([]*queue.Queue{q}, queue.ConsumerConfig{})
		require.NoError(t, err)
		defer c.Close()
		r, wait := consume(ctx, c)
		results, waits = append(results, r), append(waits, wait)
	}
	defer func() {
		cancel()
		for _, w := range waits {
			w()
		}
	}()
	time.Sleep(100 * time.Millisecond) // both consumers asleep on the marker

	const n = 20
	added := map[string]bool{}
	takenBy := map[string]string{}
	record := func(id, by string) {
		require.True(t, added[id], "%s took unknown job %s", by, id)
		require.Empty(t, takenBy[id], "job %s taken by %s and %s", id, takenBy[id], by)
		takenBy[id] = by
	}
	for i := range n {
		added[add(t, q, queue.AddOptions{})] = true
		if i%2 == 0 { // the slot keeps taking jobs, not always the last one
			var next *queue.Job
			var err error
			if cur != nil {
				next, err = q.CompleteAndFetch(ctx, cur.ID, cur.Token, nil, queue.NewToken())
			} else {
				next, err = q.Fetch(ctx, queue.NewToken())
			}
			require.NoError(t, err)
			if next != nil {
				record(next.ID, "slot")
			}
			cur = next
		}
	}
	deadline := time.After(3 * time.Second)
	for len(takenBy) < n {
		select {
		case got := <-results[0]:
			require.NoError(t, got.err)
			record(got.job.ID, "consumer 1")
		case got := <-results[1]:
			require.NoError(t, got.err)
			record(got.job.ID, "consumer 2")
		case <-deadline:
			t.Fatalf("%d of %d added jobs taken: a sleeper missed a wake-up", len(takenBy), n)
		}
	}
}
