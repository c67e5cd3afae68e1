package operator_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pidispatch/pidispatch/enqueue"
	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/fleetstate"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/internal/testkit/logtest"
	"github.com/pidispatch/pidispatch/jobs"
	"github.com/pidispatch/pidispatch/operator"
	"github.com/pidispatch/pidispatch/queue"
)

func addJob(t *testing.T, q *queue.Queue, id string, opts queue.AddOptions) {
	t.Helper()
	opts.JobID = id
	if _, added, err := q.Add(context.Background(), "j", json.RawMessage(`{}`), opts); err != nil || !added {
		t.Fatalf("add %s: %v %v", id, added, err)
	}
}

func notFound(t *testing.T, client redis.UniversalClient, id string) {
	t.Helper()
	dir, err := queue.NewDirectory(client, queue.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := dir.Find(context.Background(), id); !errors.Is(err, queue.ErrNotFound) {
		t.Fatalf("job %s still found: %v", id, err)
	}
}

// Jobs that are not running are removed from whichever queue holds them.
func TestCancelPendingJobs(t *testing.T) {
	db := livetest.Valkey(t)
	ctx := context.Background()
	host := mustQueue(t, db.Client, fleet.HostQueueName("alpha"))
	shared := mustQueue(t, db.Client, fleet.SharedQueue)
	if err := host.Declare(ctx); err != nil {
		t.Fatal(err)
	}
	addJob(t, shared, "waiting-1", queue.AddOptions{})
	addJob(t, host, "delayed-1", queue.AddOptions{Delay: time.Hour})
	addJob(t, host, "prio-1", queue.AddOptions{Priority: 3})

	for _, tc := range []struct {
		id, queue string
		state     queue.State
	}{
		{"waiting-1", "pi-jobs", queue.StateWaiting},
		{"delayed-1", "pi-jobs@alpha", queue.StateDelayed},
		{"prio-1", "pi-jobs@alpha", queue.StatePrioritized},
	} {
		res, err := operator.Cancel(ctx, db.Client, tc.id, time.Second)
		if err != nil || res.Where != operator.CancelRemoved || res.Queue != tc.queue || res.State != tc.state || !res.Changed() {
			t.Fatalf("Cancel(%s) = %+v, %v", tc.id, res, err)
		}
		notFound(t, db.Client, tc.id)
	}
	res, err := operator.Cancel(ctx, db.Client, "waiting-1", time.Second)
	if err != nil || res.Where != operator.CancelNotFound || res.Changed() {
		t.Fatalf("second Cancel = %+v, %v", res, err)
	}
}

// A finished job and a scheduler's pending run are left alone, and said so.
func TestCancelRefusals(t *testing.T) {
	db := livetest.Valkey(t)
	ctx := context.Background()
	shared := mustQueue(t, db.Client, fleet.SharedQueue)
	addJob(t, shared, "done-1", queue.AddOptions{})
	tok := queue.NewToken()
	if j, err := shared.Fetch(ctx, tok); err != nil || j == nil {
		t.Fatal(j, err)
	}
	if err := shared.Complete(ctx, "done-1", tok, nil); err != nil {
		t.Fatal(err)
	}
	res, err := operator.Cancel(ctx, db.Client, "done-1", time.Second)
	if err != nil || res.Where != operator.CancelFinished || res.State != queue.StateCompleted || res.Changed() {
		t.Fatalf("finished = %+v, %v", res, err)
	}

	host := mustQueue(t, db.Client, fleet.HostQueueName("alpha"))
	runID, err := host.UpsertScheduler(ctx, "nightly", queue.Scheduler{Pattern: "0 3 * * *", JobName: "j", Data: json.RawMessage(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	res, err = operator.Cancel(ctx, db.Client, runID, time.Second)
	if err != nil || res.Where != operator.CancelSchedulerRun || res.SchedulerID != "nightly" || res.Queue != "pi-jobs@alpha" {
		t.Fatalf("scheduler run = %+v, %v", res, err)
	}
	if _, err := host.Get(ctx, runID); err != nil {
		t.Fatalf("the scheduler's run was touched: %v", err)
	}
}

// Hostile ids give an error, never a key built from them, never a panic.
func TestCancelHostileIDs(t *testing.T) {
	db := livetest.Valkey(t)
	for _, id := range []string{"", "a\x00b", "\xff\xfe", strings.Repeat("x", 100_000), "line\nbreak"} {
		if _, err := operator.Cancel(context.Background(), db.Client, id, time.Second); !errors.Is(err, operator.ErrInvalidJobID) {
			t.Errorf("Cancel(%q) accepted", id[:min(len(id), 10)])
		}
	}
	if n, _ := db.Client.DBSize(context.Background()).Result(); n != 0 {
		t.Fatalf("hostile ids wrote %d keys", n)
	}
}

// runningJob adds a job and fetches it as a worker would; it returns its queue.
func runningJob(t *testing.T, client redis.UniversalClient, id string) *queue.Queue {
	t.Helper()
	q := mustQueue(t, client, fleet.HostQueueName("alpha"))
	addJob(t, q, id, queue.AddOptions{})
	if j, err := q.Fetch(context.Background(), queue.NewToken()); err != nil || j == nil || j.ID != id {
		t.Fatalf("fetch: %v %v", j, err)
	}
	return q
}

// startWatcher runs a watcher until the test ends and checks its loop exits.
func startWatcher(t *testing.T, client redis.UniversalClient, worker string) *fleetstate.CancelWatcher {
	t.Helper()
	w, err := fleetstate.NewCancelWatcher(client, worker, fleetstate.CancelWatcherConfig{Poll: 50 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run = %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Error("watcher did not stop")
		}
	})
	return w
}

// A running job is stopped through its worker's watcher: the job's cancel is
// called, the ack names the worker, the handler can tell it was an operator.
func TestCancelRunningJob(t *testing.T) {
	db := livetest.Valkey(t)
	ctx := context.Background()
	runningJob(t, db.Client, "run-1")
	w := startWatcher(t, db.Client, "alpha")
	jobCtx, stopJob := context.WithCancel(ctx)
	defer stopJob()
	var calls atomic.Int32
	stop := w.Watch(jobCtx, "run-1", func() { calls.Add(1); stopJob() })
	defer stop()

	res, err := operator.Cancel(ctx, db.Client, "run-1", 5*time.Second)
	if err != nil || res.Where != operator.CancelRunningStopped || res.Host != "alpha" || res.Queue != "pi-jobs@alpha" || !res.Changed() {
		t.Fatalf("Cancel = %+v, %v", res, err)
	}
	if calls.Load() != 1 || jobCtx.Err() == nil {
		t.Fatalf("cancel func called %d times", calls.Load())
	}
	if !w.Cancelled("run-1") || w.Cancelled("other") {
		t.Fatal("Cancelled does not tell the operator's stop")
	}
	stop()
	if !w.Cancelled("run-1") {
		t.Fatal("Cancelled forgot after stop")
	}
	if v, _ := db.Client.Get(ctx, fleetstate.CancelAckKey("run-1")).Result(); v != "alpha" {
		t.Fatalf("ack = %q", v)
	}
	if n, _ := db.Client.Exists(ctx, fleetstate.CancelRequestKey("run-1")).Result(); n != 0 {
		t.Fatal("request left behind")
	}
	if ttl, _ := db.Client.PTTL(ctx, fleetstate.CancelAckKey("run-1")).Result(); ttl <= 4*time.Minute {
		t.Fatalf("ack TTL = %s", ttl)
	}
}

// With no worker watching, the cancel times out, withdraws its request and
// reports that nothing changed.
func TestCancelRunningJobTimeout(t *testing.T) {
	db := livetest.Valkey(t)
	ctx := context.Background()
	runningJob(t, db.Client, "run-2")
	// A stale ack of an earlier cancel must not answer this one.
	if err := db.Client.Set(ctx, fleetstate.CancelAckKey("run-2"), "ghost", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	res, err := operator.Cancel(ctx, db.Client, "run-2", 600*time.Millisecond)
	if err != nil || res.Where != operator.CancelTimeout || res.Changed() {
		t.Fatalf("Cancel = %+v, %v", res, err)
	}
	// It waits its timeout out, and not past a hang-catching bound (10x).
	if el := time.Since(start); el < 600*time.Millisecond || el > 6*time.Second {
		t.Fatalf("waited %s", el)
	}
	if n, _ := db.Client.Exists(ctx, fleetstate.CancelRequestKey("run-2")).Result(); n != 0 {
		t.Fatal("the request was not withdrawn")
	}
}

// A worker that consumed the request but never acknowledged: the outcome is
// unconfirmed, not "nothing changed".
func TestCancelUnconfirmed(t *testing.T) {
	db := livetest.Valkey(t)
	ctx := context.Background()
	runningJob(t, db.Client, "run-3")
	var wg sync.WaitGroup
	wg.Go(func() {
		for range 100 {
			if n, _ := db.Client.Del(ctx, fleetstate.CancelRequestKey("run-3")).Result(); n == 1 {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
	res, err := operator.Cancel(ctx, db.Client, "run-3", 600*time.Millisecond)
	wg.Wait()
	if err != nil || res.Where != operator.CancelUnconfirmed || res.Changed() {
		t.Fatalf("Cancel = %+v, %v", res, err)
	}
}

// One MGET per poll covers every watched job; a stopped watch or an ended
// job context leaves a request alone; an ack value that is not a name is not
// repeated to the operator.
func TestCancelWatcherWatchLifecycle(t *testing.T) {
	db := livetest.Valkey(t)
	ctx := context.Background()
	w := startWatcher(t, db.Client, "alpha")

	var a, b atomic.Int32
	stopA := w.Watch(ctx, "job-a", func() { a.Add(1) })
	jobCtx, endJob := context.WithCancel(ctx)
	w.Watch(jobCtx, "job-b", func() { b.Add(1) })
	stopA()
	endJob()
	for _, id := range []string{"job-a", "job-b"} {
		if err := db.Client.Set(ctx, fleetstate.CancelRequestKey(id), "operator-cancel", time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(300 * time.Millisecond)
	if a.Load() != 0 || b.Load() != 0 {
		t.Fatal("an unwatched job was cancelled")
	}
	if n, _ := db.Client.Exists(ctx, fleetstate.CancelRequestKey("job-a"), fleetstate.CancelRequestKey("job-b")).Result(); n != 2 {
		t.Fatalf("requests consumed by a watcher not watching: %d left", n)
	}

	// Several watched jobs, one request: only that job stops.
	var c, d atomic.Int32
	defer w.Watch(ctx, "job-c", func() { c.Add(1) })()
	defer w.Watch(ctx, "job-d", func() { d.Add(1) })()
	if err := db.Client.Set(ctx, fleetstate.CancelRequestKey("job-d"), "operator-cancel", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(3 * time.Second)
	for d.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if c.Load() != 0 || d.Load() != 1 {
		t.Fatalf("c=%d d=%d", c.Load(), d.Load())
	}
}

func TestNewCancelWatcherRefusesBadInput(t *testing.T) {
	db := livetest.Valkey(t)
	if _, err := fleetstate.NewCancelWatcher(nil, "alpha", fleetstate.CancelWatcherConfig{}); err == nil {
		t.Fatal("nil client accepted")
	}
	for _, name := range []string{"", "bad name", "x.json"} {
		if _, err := fleetstate.NewCancelWatcher(db.Client, name, fleetstate.CancelWatcherConfig{}); err == nil {
			t.Errorf("worker %q accepted", name)
		}
	}
}

// The watcher's loop ends with its context and leaves no goroutine behind;
// a Valkey outage is logged once and its end once.
func TestCancelWatcherOutage(t *testing.T) {
	srv := livetest.StartServer(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), DialTimeout: 200 * time.Millisecond, MaxRetries: -1, DialerRetries: 1})
	var logs logtest.Buffer
	w, err := fleetstate.NewCancelWatcher(c, "alpha", fleetstate.CancelWatcherConfig{
		Poll: 30 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(&logs, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	before := runtime.NumGoroutine()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	defer w.Watch(ctx, "job-x", func() {})()
	srv.Stop()
	waitLog(t, &logs, "cancel_watch_unreachable")
	srv.Start()
	waitLog(t, &logs, "cancel_watch_restored")
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	_ = c.Close()
	out := logs.String()
	if strings.Count(out, "cancel_watch_unreachable") != 1 || strings.Count(out, "cancel_watch_restored") != 1 ||
		!strings.Contains(out, "host=alpha") {
		t.Fatalf("logs:\n%s", out)
	}
	deadline := time.Now().Add(2 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		t.Fatalf("goroutines: %d after, %d before", n, before)
	}
}

// The worker side of operator cancel: one watcher loop per worker, one Watch
// per running job; the handler asks Cancelled to record operator-cancel.
func ExampleCancelWatcher() {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer client.Close()
	w, err := fleetstate.NewCancelWatcher(client, "alpha", fleetstate.CancelWatcherConfig{})
	if err != nil {
		return
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	go func() { _ = w.Run(ctx) }()

	// In the job handler:
	runCtx, stopRun := context.WithCancel(ctx)
	unwatch := w.Watch(runCtx, "job-1", stopRun)
	<-runCtx.Done() // the container runs under runCtx
	unwatch()
	if w.Cancelled("job-1") {
		fmt.Println("record reason:", jobs.ReasonOperatorCancel)
	}
}

// A job cancelled while it waits for its retry leaves a record of the
// cancel, as the attempt it would have run next, in the canceller's logs
// dir and the run mirror; the failed attempt's record is kept.
func TestCancelRecordsARemovedRetry(t *testing.T) {
	db := livetest.Valkey(t)
	ctx := context.Background()
	shared := mustQueue(t, db.Client, fleet.SharedQueue)
	data, _ := json.Marshal(jobs.Job{Kind: jobs.KindForge, Repo: "acme/web", Flow: "fix", Task: "t"})
	if _, _, err := shared.Add(ctx, enqueue.JobName, data, queue.AddOptions{JobID: "retry-1", Attempts: 3,
		Backoff: queue.Backoff{Type: queue.BackoffFixed, Delay: time.Hour}}); err != nil {
		t.Fatal(err)
	}
	tok := queue.NewToken()
	if j, err := shared.Fetch(ctx, tok); err != nil || j == nil {
		t.Fatal(j, err)
	}
	logs := t.TempDir()
	now := time.Now()
	first := jobs.Record{JobID: "retry-1", Kind: jobs.KindForge, Target: "acme/web", Flow: "fix", StartedAt: now, EndedAt: now,
		Outcome: jobs.OutcomeFailed, Reason: jobs.ReasonExit1, Attempt: 1, Host: "alpha"}
	if _, err := jobs.WriteRecord(logs, first); err != nil {
		t.Fatal(err)
	}
	if retried, err := shared.Fail(ctx, "retry-1", tok, string(jobs.ReasonExit1), queue.FailOptions{}); err != nil || !retried {
		t.Fatalf("fail: %v %v", retried, err)
	}

	res, err := operator.CancelWith(ctx, db.Client, "retry-1", operator.CancelOptions{Wait: time.Second, Host: "ops-1", LogsDir: logs})
	if err != nil || res.Where != operator.CancelRemoved || res.State != queue.StateDelayed || res.RecordErr != nil {
		t.Fatalf("Cancel = %+v, %v", res, err)
	}
	recs, err := jobs.ReadRecords(logs, "retry-1")
	if err != nil || len(recs) != 2 {
		t.Fatalf("records %+v %v, want the failed attempt's and the cancel's", recs, err)
	}
	c := recs[1]
	if recs[0].Reason != jobs.ReasonExit1 || c.Attempt != 2 || c.Outcome != jobs.OutcomePolicy || c.Reason != jobs.ReasonOperatorCancel ||
		c.Host != "ops-1" || c.ExitCode != nil || c.Target != "acme/web" || res.RecordPath == "" {
		t.Fatalf("records %+v", recs)
	}
	runs, _, err := fleetstate.NewMirror(db.Client, fleetstate.MirrorConfig{}).Read(ctx, 10, time.Time{})
	if err != nil || len(runs) != 1 || runs[0].Reason != jobs.ReasonOperatorCancel || runs[0].Attempt != 2 {
		t.Fatalf("mirrored %+v %v", runs, err)
	}
}

// waitLog waits (under load, as long as it takes up to 30 s) for event in logs.
func waitLog(t *testing.T, logs *logtest.Buffer, event string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(logs.String(), event) {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within 30s; logs:\n%s", event, logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}
