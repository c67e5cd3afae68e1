package queue_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/queue"
)

// These tests drive the real bullmq npm package, each major the fleet may
// run (versions pinned by testdata/bullmq/package-lock.json for BullMQ 5 and
// testdata/bullmq6/package-lock.json for BullMQ 6), against the same
// database as our queue, through testdata/interop.js run over the
// node_modules of that folder.

// bullmq is one installed BullMQ major: the npm folder holding it, and the
// Bull Board folder that runs over it.
type bullmq struct {
	major    int
	dir      string
	boardDir string
}

var bullmqs = []bullmq{
	{major: 5, dir: "testdata/bullmq", boardDir: "testdata/bullboard"},
	{major: 6, dir: "testdata/bullmq6", boardDir: "testdata/bullboard6"},
}

// eachBullMQ runs f as a parallel subtest for every BullMQ major.
func eachBullMQ(t *testing.T, f func(t *testing.T, bm bullmq)) {
	t.Helper()
	for _, bm := range bullmqs {
		t.Run(fmt.Sprintf("bullmq%d", bm.major), func(t *testing.T) {
			t.Parallel()
			f(t, bm)
		})
	}
}

// config is the queue configuration of a fleet whose Node clients run this
// major: new queues in its layout.
func (bm bullmq) config() queue.Config {
	return queue.Config{Layout: bm.layout()}
}

// pausedReady is the counts of a paused queue holding n ready jobs: in the
// paused list under BullMQ 5, in wait under 6.
func (bm bullmq) pausedReady(n int64) queue.Counts {
	if bm.major == 5 {
		return queue.Counts{Paused: n}
	}
	return queue.Counts{Waiting: n}
}

func (bm bullmq) layout() queue.Layout {
	if bm.major == 5 {
		return queue.Layout5
	}
	return queue.Layout6
}

// nodeEnv is the environment a script of testdata runs in: ours, with
// NODE_PATH naming dir's node_modules, where its require calls resolve.
func nodeEnv(t *testing.T, dir string) []string {
	t.Helper()
	abs, err := filepath.Abs(filepath.Join(dir, "node_modules"))
	require.NoError(t, err)
	return append(os.Environ(), "NODE_PATH="+abs)
}

// nodeBin finds node and the installed bullmq package, skipping (or failing
// when live services are required) without them.
func (bm bullmq) nodeBin(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("node")
	if err != nil {
		if livetest.Required() {
			t.Fatalf("node not found on PATH: %v", err)
		}
		t.Skip("node not found on PATH")
	}
	if _, err := os.Stat(filepath.Join(bm.dir, "node_modules", "bullmq", "package.json")); err != nil {
		if livetest.Required() {
			t.Fatalf("run npm ci in queue/%s", bm.dir)
		}
		t.Skipf("bullmq not installed: run npm ci in queue/%s", bm.dir)
	}
	return bin
}

// bull runs one interop scenario and decodes its JSON output into out.
func (bm bullmq) bull(t *testing.T, db *livetest.ValkeyDB, scenario string, args any, out any) {
	t.Helper()
	bin := bm.nodeBin(t)
	raw, err := json.Marshal(args)
	require.NoError(t, err)
	// Long enough for cronNext's thousands of cron-parser calls on a loaded machine.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, filepath.Join("testdata", "interop.js"), scenario, db.URL, string(raw))
	cmd.Env = nodeEnv(t, bm.dir)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), "bullmq %d %s: %s", bm.major, scenario, stderr.String())
	if out != nil {
		require.NoError(t, json.Unmarshal(stdout.Bytes(), out), "bullmq %d %s output %q", bm.major, scenario, stdout.String())
	}
}

type nodeJob struct {
	ID           string          `json:"id"`
	Name         string          `json:"name"`
	Data         json.RawMessage `json:"data"`
	Opts         json.RawMessage `json:"opts"`
	ReturnValue  json.RawMessage `json:"returnvalue"`
	FailedReason string          `json:"failedReason"`
	Stacktrace   []string        `json:"stacktrace"`
	AttemptsMade int             `json:"attemptsMade"`
	Timestamp    int64           `json:"timestamp"`
	ProcessedOn  int64           `json:"processedOn"`
	FinishedOn   int64           `json:"finishedOn"`
	RepeatJobKey string          `json:"repeatJobKey"`
	State        string          `json:"state"`
}

type nodeProcessed struct {
	Processed []nodeJob `json:"processed"`
}

type nodeCounts struct {
	Waiting     int64 `json:"waiting"`
	Active      int64 `json:"active"`
	Paused      int64 `json:"paused"`
	Delayed     int64 `json:"delayed"`
	Prioritized int64 `json:"prioritized"`
	Completed   int64 `json:"completed"`
	Failed      int64 `json:"failed"`
}

func (c nodeCounts) ours() queue.Counts {
	return queue.Counts{Waiting: c.Waiting, Active: c.Active, Paused: c.Paused, Delayed: c.Delayed,
		Prioritized: c.Prioritized, Completed: c.Completed, Failed: c.Failed}
}

func TestInterop_NodeAddsWeComplete(t *testing.T) {
	t.Parallel()
	eachBullMQ(t, func(t *testing.T, bm bullmq) {
		db, q := setup(t, bm.config())
		ctx := testCtx(t)
		var added struct{ ID string }
		bm.bull(t, db, "add", map[string]any{"name": "from-node", "data": map[string]any{"x": 1},
			"opts": map[string]any{"attempts": 2, "backoff": map[string]any{"type": "exponential", "delay": 60000},
				"removeOnComplete": map[string]any{"age": 3600}}}, &added)

		job := fetch(t, q, "go")
		require.Equal(t, added.ID, job.ID)
		require.Equal(t, "from-node", job.Name)
		require.JSONEq(t, `{"x":1}`, string(job.Data))
		require.Equal(t, 2, job.Attempts)
		require.Equal(t, queue.Backoff{Type: queue.BackoffExponential, Delay: time.Minute}, job.Backoff)
		require.Equal(t, queue.Keep{Age: time.Hour}, job.RemoveOnComplete)
		require.NoError(t, q.Complete(ctx, job.ID, "go", json.RawMessage(`{"by":"go","cost":0.25}`)))

		var got nodeJob
		bm.bull(t, db, "get", map[string]any{"id": added.ID}, &got)
		require.Equal(t, "completed", got.State)
		require.JSONEq(t, `{"by":"go","cost":0.25}`, string(got.ReturnValue))
		require.Equal(t, 1, got.AttemptsMade)
		require.NotZero(t, got.FinishedOn)
	})
}

func TestInterop_WeAddNodeProcesses(t *testing.T) {
	t.Parallel()
	eachBullMQ(t, func(t *testing.T, bm bullmq) {
		db, q := setup(t, bm.config())
		ctx := testCtx(t)
		id, _, err := q.Add(ctx, "from-go", json.RawMessage(`{"y":2}`), queue.AddOptions{
			JobID: "go-1", Attempts: 3, RemoveOnComplete: queue.Keep{Count: 10}})
		require.NoError(t, err)

		var out nodeProcessed
		bm.bull(t, db, "process", map[string]any{"count": 1, "timeoutMs": 5000, "returnvalue": map[string]any{"by": "node"}}, &out)
		require.Len(t, out.Processed, 1)
		require.Equal(t, id, out.Processed[0].ID)
		require.Equal(t, "from-go", out.Processed[0].Name)
		require.JSONEq(t, `{"y":2}`, string(out.Processed[0].Data))

		job, err := q.Get(ctx, id)
		require.NoError(t, err)
		require.Equal(t, queue.StateCompleted, job.State)
		require.JSONEq(t, `{"by":"node"}`, string(job.ReturnValue))
		require.Equal(t, 1, job.AttemptsMade)

		// A Node worker honours our attempts and backoff when the job fails.
		retry, _, err := q.Add(ctx, "flaky", nil, queue.AddOptions{Attempts: 2,
			Backoff: queue.Backoff{Type: queue.BackoffFixed, Delay: time.Hour}})
		require.NoError(t, err)
		bm.bull(t, db, "process", map[string]any{"count": 1, "timeoutMs": 5000, "fail": "boom"}, &out)
		job, err = q.Get(ctx, retry)
		require.NoError(t, err)
		require.Equal(t, queue.StateDelayed, job.State, "retried after our backoff")
		require.Equal(t, time.Hour, job.Delay)
		require.Equal(t, 1, job.AttemptsMade)
		require.Equal(t, "boom", job.FailedReason)
	})
}

func TestInterop_PauseSeenBothWays(t *testing.T) {
	t.Parallel()
	eachBullMQ(t, func(t *testing.T, bm bullmq) {
		db, q := setup(t, bm.config())
		ctx := testCtx(t)
		require.NoError(t, q.Pause(ctx))
		var p struct{ Paused bool }
		bm.bull(t, db, "isPaused", nil, &p)
		require.True(t, p.Paused, "BullMQ's isPaused() reads our pause")
		id := add(t, q, queue.AddOptions{})
		var out nodeProcessed
		bm.bull(t, db, "process", map[string]any{"timeoutMs": 1500}, &out)
		require.Empty(t, out.Processed, "a BullMQ worker takes nothing from our paused queue")
		require.Equal(t, bm.pausedReady(1), counts(t, q))
		require.NoError(t, q.Resume(ctx))

		bm.bull(t, db, "pause", nil, &p)
		require.True(t, p.Paused)
		paused, err := q.IsPaused(ctx)
		require.NoError(t, err)
		require.True(t, paused)
		job, err := q.Fetch(ctx, "t")
		require.NoError(t, err)
		require.Nil(t, job, "we take nothing from a queue BullMQ paused")
		bm.bull(t, db, "resume", nil, &p)
		require.Equal(t, id, fetch(t, q, "t").ID)
	})
}

func TestInterop_CountsAgreeInEveryState(t *testing.T) {
	t.Parallel()
	eachBullMQ(t, func(t *testing.T, bm bullmq) {
		db, q := setup(t, bm.config())
		ctx := testCtx(t)
		var added struct{ ID string }
		bm.bull(t, db, "add", map[string]any{"name": "n1"}, &added)
		ours := add(t, q, queue.AddOptions{})
		bm.bull(t, db, "add", map[string]any{"name": "n2"}, nil)
		add(t, q, queue.AddOptions{})
		add(t, q, queue.AddOptions{})
		bm.bull(t, db, "add", map[string]any{"name": "later", "opts": map[string]any{"delay": 3600000}}, nil)
		add(t, q, queue.AddOptions{Delay: time.Hour})
		bm.bull(t, db, "add", map[string]any{"name": "prio", "opts": map[string]any{"priority": 3}}, nil)

		require.Equal(t, added.ID, fetch(t, q, "t").ID)
		require.NoError(t, q.Complete(ctx, added.ID, "t", nil))
		require.Equal(t, ours, fetch(t, q, "t").ID)
		_, err := q.Fail(ctx, ours, "t", "x", queue.FailOptions{})
		require.NoError(t, err)
		fetch(t, q, "t")

		var nc nodeCounts
		bm.bull(t, db, "counts", nil, &nc)
		want := queue.Counts{Waiting: 2, Active: 1, Delayed: 2, Prioritized: 1, Completed: 1, Failed: 1}
		require.Equal(t, want, counts(t, q))
		require.Equal(t, want, nc.ours())

		bm.bull(t, db, "pause", nil, nil)
		bm.bull(t, db, "counts", nil, &nc)
		held := bm.pausedReady(want.Waiting)
		want.Waiting, want.Paused = held.Waiting, held.Paused
		require.Equal(t, want, counts(t, q))
		require.Equal(t, want, nc.ours())
	})
}

func TestInterop_NodeDelayedJobPromotedOnTime(t *testing.T) {
	t.Parallel()
	eachBullMQ(t, func(t *testing.T, bm bullmq) {
		db, q := setup(t, bm.config())
		c, err := queue.NewConsumer([]*queue.Queue{q}, queue.ConsumerConfig{})
		require.NoError(t, err)
		defer c.Close()
		ctx, cancel := context.WithCancel(testCtx(t))
		results, wait := consume(ctx, c)
		defer func() { cancel(); wait() }()

		const delay = 1000 * time.Millisecond
		var added struct {
			ID        string
			Timestamp int64
		}
		bm.bull(t, db, "add", map[string]any{"name": "later", "opts": map[string]any{"delay": delay.Milliseconds()}}, &added)
		got := <-results
		require.NoError(t, got.err)
		require.Equal(t, added.ID, got.job.ID)
		late := got.job.ProcessedOn.Sub(time.UnixMilli(added.Timestamp))
		t.Logf("BullMQ job delayed %v taken after %v", delay, late)
		require.GreaterOrEqual(t, late, delay)
		// Not delayed in the wrong unit (1000x) or clock: a hang-catching bound.
		require.Less(t, late, delay+10*time.Second)
	})
}

func TestInterop_SameJobIDFromBothSidesExistsOnce(t *testing.T) {
	t.Parallel()
	eachBullMQ(t, func(t *testing.T, bm bullmq) {
		db, q := setup(t, bm.config())
		ctx := testCtx(t)
		bm.bull(t, db, "add", map[string]any{"name": "node", "data": map[string]any{"from": "node"},
			"opts": map[string]any{"jobId": "dup-1"}}, nil)
		id, added, err := q.Add(ctx, "go", json.RawMessage(`{"from":"go"}`), queue.AddOptions{JobID: "dup-1"})
		require.NoError(t, err)
		require.False(t, added)
		require.Equal(t, "dup-1", id)

		add(t, q, queue.AddOptions{JobID: "dup-2"})
		var again struct{ ID string }
		bm.bull(t, db, "add", map[string]any{"name": "node", "data": map[string]any{"from": "node"},
			"opts": map[string]any{"jobId": "dup-2"}}, &again)
		require.Equal(t, "dup-2", again.ID)

		var got nodeJob
		bm.bull(t, db, "get", map[string]any{"id": "dup-2"}, &got)
		require.JSONEq(t, `{"n":1}`, string(got.Data), "the first add wins")
		var nc nodeCounts
		bm.bull(t, db, "counts", nil, &nc)
		require.Equal(t, int64(2), nc.Waiting)
		require.Equal(t, int64(2), counts(t, q).Waiting)
	})
}

type nodeScheduler struct {
	Key      string `json:"key"`
	Name     string `json:"name"`
	Pattern  string `json:"pattern"`
	TZ       string `json:"tz"`
	Next     int64  `json:"next"`
	Template struct {
		Data json.RawMessage `json:"data"`
		Opts json.RawMessage `json:"opts"`
	} `json:"template"`
}

func TestInterop_NodeListsOurScheduler(t *testing.T) {
	t.Parallel()
	eachBullMQ(t, func(t *testing.T, bm bullmq) {
		db, q := setup(t, bm.config())
		ctx := testCtx(t)
		_, err := q.UpsertScheduler(ctx, "nightly", queue.Scheduler{Pattern: "0 3 * * *", TZ: "Europe/Amsterdam",
			JobName: "cron", Data: json.RawMessage(`{"k":1}`), RemoveOnComplete: queue.Keep{Age: 24 * time.Hour}})
		require.NoError(t, err)
		ours, err := q.Schedulers(ctx)
		require.NoError(t, err)

		var list []nodeScheduler
		bm.bull(t, db, "schedulers", nil, &list)
		require.Len(t, list, 1)
		s := list[0]
		require.Equal(t, "nightly", s.Key)
		require.Equal(t, "cron", s.Name)
		require.Equal(t, "0 3 * * *", s.Pattern)
		require.Equal(t, "Europe/Amsterdam", s.TZ)
		require.Equal(t, ours[0].Next.UnixMilli(), s.Next)
		require.JSONEq(t, `{"k":1}`, string(s.Template.Data))
		require.JSONEq(t, `{"removeOnComplete":{"age":86400}}`, string(s.Template.Opts))
	})
}

func TestInterop_SchedulerRunsAdvanceOnEitherSide(t *testing.T) {
	t.Parallel()
	eachBullMQ(t, func(t *testing.T, bm bullmq) {
		db, q := setup(t, bm.config())
		ctx := testCtx(t)

		// A BullMQ worker takes a run of our scheduler and makes the next one.
		_, err := q.UpsertScheduler(ctx, "ours", queue.Scheduler{Pattern: "* * * * * *", JobName: "tick"})
		require.NoError(t, err)
		var out nodeProcessed
		bm.bull(t, db, "process", map[string]any{"count": 1, "timeoutMs": 5000}, &out)
		// A second run (one a second) may be taken before the worker closes.
		require.NotEmpty(t, out.Processed)
		require.Equal(t, "ours", out.Processed[0].RepeatJobKey)
		ran := millisOf(t, out.Processed[0].ID)
		list, err := q.Schedulers(ctx)
		require.NoError(t, err)
		require.Len(t, list, 1)
		require.Greater(t, list[0].Next.UnixMilli(), ran, "BullMQ created the next run from our job's opts")
		removed, err := q.RemoveScheduler(ctx, "ours")
		require.NoError(t, err)
		require.True(t, removed)

		// We take runs of BullMQ's schedulers, cron and "every", and make the next.
		bm.bull(t, db, "upsertScheduler", map[string]any{"id": "theirs", "repeat": map[string]any{"pattern": "* * * * * *"},
			"template": map[string]any{"name": "cron", "data": map[string]any{"a": 1}}}, nil)
		bm.bull(t, db, "upsertScheduler", map[string]any{"id": "every", "repeat": map[string]any{"every": 400},
			"template": map[string]any{"name": "every"}}, nil)
		seen := map[string]int64{}
		require.Eventually(t, func() bool {
			job, err := q.Fetch(ctx, "t")
			require.NoError(t, err)
			if job != nil && seen[job.SchedulerID] == 0 {
				seen[job.SchedulerID] = millisOf(t, job.ID)
			}
			return len(seen) == 2
		}, 5*time.Second, 10*time.Millisecond)
		list, err = q.Schedulers(ctx)
		require.NoError(t, err)
		require.Len(t, list, 2)
		for _, s := range list {
			require.Greater(t, s.Next.UnixMilli(), seen[s.ID], "%s advanced past the run we took", s.ID)
		}
		var nc nodeCounts
		bm.bull(t, db, "counts", nil, &nc)
		require.GreaterOrEqual(t, nc.Delayed+nc.Waiting, int64(2), "each scheduler has its pending run")
	})
}

// Our completion leaves the job's id in BullMQ's stalled set (complete.lua
// saves the SREM); BullMQ's stalled check must still leave the job alone.
func TestInterop_NodeStalledCheckLeavesOurCompletedJob(t *testing.T) {
	t.Parallel()
	eachBullMQ(t, func(t *testing.T, bm bullmq) {
		db, q := setup(t, bm.config())
		ctx := testCtx(t)
		id, _, err := q.Add(ctx, "held", []byte(`{}`), queue.AddOptions{})
		require.NoError(t, err)
		job := fetch(t, q, "go")
		require.Equal(t, id, job.ID)

		// The first check marks every active job as a candidate; ours holds
		// its lock, so it is not stalled.
		var check struct{ Stalled []string }
		bm.bull(t, db, "stalledCheck", nil, &check)
		require.Empty(t, check.Stalled)
		stalledSet := "bull:" + fleet.SharedQueue + ":stalled"
		member, err := db.Client.SIsMember(ctx, stalledSet, id).Result()
		require.NoError(t, err)
		require.True(t, member, "BullMQ's check did not mark the active job")

		require.NoError(t, q.Complete(ctx, id, "go", json.RawMessage(`{"ok":true}`)))
		member, err = db.Client.SIsMember(ctx, stalledSet, id).Result()
		require.NoError(t, err)
		require.True(t, member, "the completion was expected to leave the id in the stalled set")

		// The next check finds the id without a lock, but no longer active.
		time.Sleep(5 * time.Millisecond) // past the check's 1 ms guard key
		bm.bull(t, db, "stalledCheck", nil, &check)
		require.Empty(t, check.Stalled)
		var got nodeJob
		bm.bull(t, db, "get", map[string]any{"id": id}, &got)
		require.Equal(t, "completed", got.State)
		require.JSONEq(t, `{"ok":true}`, string(got.ReturnValue))
		counts, err := q.Counts(ctx)
		require.NoError(t, err)
		require.Equal(t, int64(1), counts.Completed)
		require.Zero(t, counts.Waiting+counts.Active+counts.Failed)
	})
}

// A job we fail records its reason in "stacktrace" the way a BullMQ Worker
// records each failed attempt's stack: a JSON array, one entry per failed
// attempt, bounded by opts.stackTraceLimit.
func TestInterop_FailedJobCarriesStacktrace(t *testing.T) {
	t.Parallel()
	eachBullMQ(t, func(t *testing.T, bm bullmq) {
		db, q := setup(t, bm.config())
		ctx := testCtx(t)
		id := add(t, q, queue.AddOptions{Attempts: 2})
		fetch(t, q, "t")
		retried, err := q.Fail(ctx, id, "t", "first", queue.FailOptions{})
		require.NoError(t, err)
		require.True(t, retried)
		require.Equal(t, id, fetch(t, q, "t").ID)
		retried, err = q.Fail(ctx, id, "t", "second", queue.FailOptions{})
		require.NoError(t, err)
		require.False(t, retried)

		var got nodeJob
		bm.bull(t, db, "get", map[string]any{"id": id}, &got)
		require.Equal(t, "failed", got.State)
		require.Equal(t, "second", got.FailedReason)
		require.Equal(t, []string{"first", "second"}, got.Stacktrace)

		// The bound: a Node job with stackTraceLimit 1 keeps the last entry.
		var added struct{ ID string }
		bm.bull(t, db, "add", map[string]any{"name": "n", "opts": map[string]any{"stackTraceLimit": 1, "attempts": 3}}, &added)
		for _, reason := range []string{"a", "b"} {
			require.Equal(t, added.ID, fetch(t, q, "t").ID)
			_, err = q.Fail(ctx, added.ID, "t", reason, queue.FailOptions{})
			require.NoError(t, err)
		}
		bm.bull(t, db, "get", map[string]any{"id": added.ID}, &got)
		require.Equal(t, []string{"b"}, got.Stacktrace)
	})
}

// A Consumer names its connections as a BullMQ Worker names its blocking
// connection, so BullMQ's getWorkers() (and Bull Board) list it under each
// of its queues. The control is a BullMQ Worker with the same name on a
// twin queue.
func TestInterop_NodeListsOurWorkers(t *testing.T) {
	t.Parallel()
	eachBullMQ(t, func(t *testing.T, bm bullmq) {
		db := livetest.Valkey(t)
		// CLIENT LIST spans the server: a prefix of its own keeps other tests'
		// consumers out of the lists.
		prefix := fmt.Sprintf("wk%d", time.Now().UnixNano())
		cfg := queue.Config{Prefix: prefix, WorkerName: "host-a", Layout: bm.layout()}
		shared, err := queue.New(db.Client, fleet.SharedQueue, cfg)
		require.NoError(t, err)
		own, err := queue.New(db.Client, fleet.HostQueueName("host-a"), cfg)
		require.NoError(t, err)
		control := fleet.HostQueueName("node-twin")

		c, err := queue.NewConsumer([]*queue.Queue{shared, own}, queue.ConsumerConfig{})
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(testCtx(t), 100*time.Millisecond)
		_, _, err = c.Next(ctx, "t")
		cancel()
		require.ErrorIs(t, err, context.DeadlineExceeded)

		var got map[string][]string
		bm.bull(t, db, "workers", map[string]any{"prefix": prefix, "control": control, "name": "host-a",
			"queues": []string{control, shared.Name(), own.Name()}}, &got)
		require.Len(t, got[control], 1, "the BullMQ control worker is listed")
		b64 := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
		want := func(q string) []string {
			return []string{strings.Replace(got[control][0], b64(control), b64(q), 1)}
		}
		require.Equal(t, prefix+":"+b64(control)+":w:host-a", got[control][0])
		require.Equal(t, want(shared.Name()), got[shared.Name()], "listed as BullMQ lists its worker")
		require.Equal(t, want(own.Name()), got[own.Name()], "listed under every queue it consumes")

		require.NoError(t, c.Close())
		bm.bull(t, db, "workers", map[string]any{"prefix": prefix, "queues": []string{shared.Name(), own.Name()}}, &got)
		require.Empty(t, got[shared.Name()], "a closed consumer is no longer listed")
		require.Empty(t, got[own.Name()])
	})
}

type keepLastView struct {
	Before []waitingJob `json:"before"`
	After  []waitingJob `json:"after"`
	Holder string       `json:"holder"`
}

type waitingJob struct {
	ID            string          `json:"id"`
	Name          string          `json:"name"`
	Data          json.RawMessage `json:"data"`
	Deduplication json.RawMessage `json:"deduplication"`
}

// Deduplication's keepLastIfActive mode: a job deduplicated while the
// holder is active is kept and added when the holder completes or fails
// for good. The control runs the same steps with BullMQ alone on a twin
// queue; we hold the job, and the later adds come from Node or from us.
func TestInterop_DedupKeepLastIfActive(t *testing.T) {
	t.Parallel()
	eachBullMQ(t, func(t *testing.T, bm bullmq) {
		for _, tc := range []struct {
			finish  string
			nodeAdd bool
		}{{"complete", true}, {"fail", false}, {"fail", true}, {"complete", false}} {
			t.Run(fmt.Sprintf("%s/nodeAdds=%v", tc.finish, tc.nodeAdd), func(t *testing.T) {
				t.Parallel()
				// The held job waits for several Node runs: a loaded machine
				// may take longer than the default lock.
				cfg := bm.config()
				cfg.LockTTL = 5 * time.Minute
				db, q := setup(t, cfg)
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
				defer cancel()
				var control keepLastView
				bm.bull(t, db, "keepLastControl", map[string]any{"queue": fleet.HostQueueName("twin"),
					"dedupId": "d", "finish": tc.finish}, &control)
				require.Len(t, control.After, 1, "BullMQ added the kept job")

				dedup := &queue.Dedup{ID: "d", KeepLastIfActive: true}
				_, _, err := q.Add(ctx, "job", json.RawMessage(`{"n":1}`), queue.AddOptions{Dedup: dedup})
				require.NoError(t, err)
				held := fetch(t, q, "t")
				for _, n := range []int{2, 3} {
					if tc.nodeAdd {
						bm.bull(t, db, "add", map[string]any{"name": "job", "data": map[string]any{"n": n},
							"opts": map[string]any{"deduplication": map[string]any{"id": "d", "keepLastIfActive": true}}}, nil)
						continue
					}
					id, added, err := q.Add(ctx, "job", json.RawMessage(fmt.Sprintf(`{"n":%d}`, n)), queue.AddOptions{Dedup: dedup})
					require.NoError(t, err)
					require.False(t, added)
					require.Equal(t, held.ID, id, "reported as deduplicated by the active job")
				}
				var ours keepLastView
				bm.bull(t, db, "waiting", nil, &ours.Before)
				if tc.finish == "fail" {
					_, err = q.Fail(ctx, held.ID, "t", "boom", queue.FailOptions{})
				} else {
					err = q.Complete(ctx, held.ID, "t", json.RawMessage(`{"ok":true}`))
				}
				require.NoError(t, err)
				bm.bull(t, db, "waiting", nil, &ours.After)
				ours.Holder, err = db.Client.Get(ctx, "bull:"+fleet.SharedQueue+":de:d").Result()
				require.NoError(t, err)
				require.Equal(t, control, ours)

				// The kept job holds the dedup id in turn, and releases it.
				kept := fetch(t, q, "t")
				require.JSONEq(t, `{"n":3}`, string(kept.Data))
				require.NoError(t, q.Complete(ctx, kept.ID, "t", nil))
				n, err := db.Client.Exists(ctx, "bull:"+fleet.SharedQueue+":de:d", "bull:"+fleet.SharedQueue+":dn:d").Result()
				require.NoError(t, err)
				require.Zero(t, n)
			})
		}
	})
}

func TestAdd_KeepLastIfActiveRefusesTTL(t *testing.T) {
	_, q := setup(t, queue.Config{})
	_, _, err := q.Add(testCtx(t), "job", nil, queue.AddOptions{Dedup: &queue.Dedup{ID: "d", TTL: time.Second, KeepLastIfActive: true}})
	var oe *queue.OptionError
	require.ErrorAs(t, err, &oe)
	require.Contains(t, err.Error(), "KeepLastIfActive")
}

// takeRuns takes and completes runs of q's schedulers for d, returning the
// millis of each run in order.
func takeRuns(t *testing.T, q *queue.Queue, d time.Duration) []int64 {
	t.Helper()
	ctx := testCtx(t)
	var runs []int64
	for end := time.Now().Add(d); time.Now().Before(end); {
		job, err := q.Fetch(ctx, "t")
		require.NoError(t, err)
		if job == nil {
			time.Sleep(20 * time.Millisecond)
			continue
		}
		runs = append(runs, millisOf(t, job.ID))
		require.NoError(t, q.Complete(ctx, job.ID, "t", nil))
	}
	return runs
}

func pending(t *testing.T, q *queue.Queue) int64 {
	c := counts(t, q)
	return c.Waiting + c.Delayed + c.Prioritized
}

// A scheduler's repeat.limit and endDate end it, and its startDate delays
// it, whichever side upserted it and whichever side takes its runs. The
// control is the same scheduler on a twin queue, upserted and run by
// BullMQ alone.
func TestInterop_SchedulerBoundsAsBullMQ(t *testing.T) {
	t.Parallel()
	eachBullMQ(t, func(t *testing.T, bm bullmq) {
		twin := fleet.HostQueueName("twin")
		control := func(t *testing.T, db *livetest.ValkeyDB, repeat map[string]any, d time.Duration) []nodeJob {
			bm.bull(t, db, "upsertScheduler", map[string]any{"queue": twin, "id": "s", "repeat": repeat,
				"template": map[string]any{"name": "tick"}}, nil)
			var out nodeProcessed
			bm.bull(t, db, "process", map[string]any{"queue": twin, "timeoutMs": d.Milliseconds()}, &out)
			return out.Processed
		}
		t.Run("LimitUpsertedByNode", func(t *testing.T) {
			t.Parallel()
			db, q := setup(t, bm.config())
			repeat := map[string]any{"pattern": "* * * * * *", "limit": 3}
			want := control(t, db, repeat, 5*time.Second)
			require.Len(t, want, 3, "BullMQ makes limit runs")
			bm.bull(t, db, "upsertScheduler", map[string]any{"id": "s", "repeat": repeat,
				"template": map[string]any{"name": "tick"}}, nil)
			require.Len(t, takeRuns(t, q, 5*time.Second), len(want))
			require.Zero(t, pending(t, q), "no run after the last")
		})
		t.Run("LimitOursMixedConsumers", func(t *testing.T) {
			t.Parallel()
			db, q := setup(t, bm.config())
			want := control(t, db, map[string]any{"pattern": "* * * * * *", "limit": 4}, 6*time.Second)
			require.Len(t, want, 4)
			_, err := q.UpsertScheduler(testCtx(t), "s", queue.Scheduler{Pattern: "* * * * * *", Limit: 4, JobName: "tick"})
			require.NoError(t, err)
			runs := takeRuns(t, q, 1500*time.Millisecond) // we take one or two
			var out nodeProcessed
			bm.bull(t, db, "process", map[string]any{"count": 1, "timeoutMs": 3000}, &out) // Node takes the next
			require.NotEmpty(t, out.Processed)
			var rep struct{ Limit, Count int }
			require.NoError(t, json.Unmarshal(jsonField(t, out.Processed[0].Opts, "repeat"), &rep))
			require.Equal(t, 4, rep.Limit, "our runs carry the limit to Node workers")
			runs = append(runs, takeRuns(t, q, 4*time.Second)...)
			require.Equal(t, len(want), len(runs)+len(out.Processed))
			require.Zero(t, pending(t, q))
			list, err := q.Schedulers(testCtx(t))
			require.NoError(t, err)
			require.Equal(t, 4, list[0].Limit)
		})
		t.Run("EndDate", func(t *testing.T) {
			t.Parallel()
			db, q := setup(t, bm.config())
			// Node takes seconds to start on a loaded machine: its end is later.
			// (BullMQ 6 refuses an end date already past at the upsert.)
			end := serverNow(t, db).Add(15 * time.Second).Truncate(time.Second).Add(500 * time.Millisecond)
			want := control(t, db, map[string]any{"pattern": "* * * * * *", "endDate": end.UnixMilli()}, 18*time.Second)
			// A run taken after the end date makes no next run, so under load
			// BullMQ's last run may come before the last second.
			require.NotEmpty(t, want)
			require.LessOrEqual(t, millisOf(t, want[len(want)-1].ID), end.UnixMilli(), "BullMQ makes no run past the end date")

			end = serverNow(t, db).Add(2500 * time.Millisecond).Truncate(time.Second).Add(500 * time.Millisecond)
			_, err := q.UpsertScheduler(testCtx(t), "s", queue.Scheduler{Pattern: "* * * * * *", EndDate: end, JobName: "tick"})
			require.NoError(t, err)
			runs := takeRuns(t, q, 5*time.Second)
			require.NotEmpty(t, runs)
			require.LessOrEqual(t, runs[len(runs)-1], end.UnixMilli(), "nor do we")
			require.Greater(t, runs[len(runs)-1], end.Add(-2*time.Second).UnixMilli(), "the schedule ran up to its end")
			require.Zero(t, pending(t, q))
			_, err = q.UpsertScheduler(testCtx(t), "late", queue.Scheduler{Pattern: "* * * * * *", EndDate: end, JobName: "tick"})
			require.ErrorIs(t, err, queue.ErrScheduleEnded)
		})
		t.Run("StartDate", func(t *testing.T) {
			t.Parallel()
			db, q := setup(t, bm.config())
			start := serverNow(t, db).Add(time.Hour).Truncate(time.Second) // a matching second itself
			bm.bull(t, db, "upsertScheduler", map[string]any{"queue": twin, "id": "s",
				"repeat": map[string]any{"pattern": "*/5 * * * * *", "startDate": start.UnixMilli()}}, nil)
			var theirs []nodeScheduler
			bm.bull(t, db, "schedulers", map[string]any{"queue": twin}, &theirs)
			require.Len(t, theirs, 1)
			_, err := q.UpsertScheduler(testCtx(t), "s", queue.Scheduler{Pattern: "*/5 * * * * *", StartDate: start, JobName: "tick"})
			require.NoError(t, err)
			ours, err := q.Schedulers(testCtx(t))
			require.NoError(t, err)
			require.Equal(t, theirs[0].Next, ours[0].Next.UnixMilli(), "the first run is BullMQ's")
			require.Equal(t, start.UnixMilli(), ours[0].StartDate.UnixMilli())
		})
	})
}

func jsonField(t *testing.T, raw json.RawMessage, key string) json.RawMessage {
	t.Helper()
	var m map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(raw, &m))
	return m[key]
}
