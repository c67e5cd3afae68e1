package queue_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/internal/testkit/logtest"
	"github.com/pidispatch/pidispatch/queue"
)

// Pause across a mixed fleet: each check runs the same steps twice in one
// database, once on our queue with Go doing some of them, once on a
// BullMQ-only control queue, and requires BullMQ to see both alike. Under
// BullMQ 6 a paused queue's jobs stay in wait and the meta flag alone
// pauses; under BullMQ 5 they move to the paused list.

const controlQueue = "control"

// op is one step of a pause scenario (interop.js's steps scenario): add
// job ID (after Delay ms), pause, resume, promote (a consumer's fetch on the
// paused queue, which promotes due delayed jobs), sleep Ms, or view (what
// BullMQ reports). On our queue Go does the steps marked byGo.
type op struct {
	Op    string `json:"op"`
	ID    string `json:"id,omitempty"`
	Delay int64  `json:"delay,omitempty"`
	Ms    int64  `json:"ms,omitempty"`
	byGo  bool
}

func goOp(o op) op { o.byGo = true; return o }

// queueView is what BullMQ reports of a queue: its counts and its waiting
// jobs in order (what Bull Board shows).
type queueView struct {
	Counts  nodeCounts
	Waiting []string
}

// runOps runs ops on the control queue, all by BullMQ (in one process),
// and on our queue q, Go doing its part, and returns the views of each.
func runOps(t *testing.T, bm bullmq, db *livetest.ValkeyDB, q *queue.Queue, ops ...op) (control, ours []queueView) {
	t.Helper()
	bm.bull(t, db, "steps", map[string]any{"queue": controlQueue, "steps": ops}, &control)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var batch []op
	flush := func() {
		if len(batch) == 0 {
			return
		}
		var views []queueView
		bm.bull(t, db, "steps", map[string]any{"queue": q.Name(), "steps": batch}, &views)
		ours = append(ours, views...)
		batch = nil
	}
	for _, o := range ops {
		if !o.byGo || o.Op == "view" || o.Op == "sleep" {
			batch = append(batch, o)
			continue
		}
		flush()
		switch o.Op {
		case "add":
			_, added, err := q.Add(ctx, "pi", json.RawMessage(`{}`), queue.AddOptions{JobID: o.ID, Delay: time.Duration(o.Delay) * time.Millisecond})
			require.NoError(t, err)
			require.True(t, added)
		case "pause", "resume":
			require.NoError(t, queue.SetPaused(ctx, o.Op == "pause", q))
		case "promote":
			job, err := q.Fetch(ctx, "t")
			require.NoError(t, err)
			require.Nil(t, job, "a paused queue gives nothing")
		default:
			t.Fatalf("op %q", o.Op)
		}
	}
	flush()
	return control, ours
}

// Go's pause, Go's adds during it and Go's promotion of a delayed job
// during it leave the queue as BullMQ's own do: BullMQ's getJobCounts() and
// getWaiting() (what Bull Board shows) read the same on both queues.
func TestInterop_PausedQueueReadsAsBullMQs(t *testing.T) {
	t.Parallel()
	eachBullMQ(t, func(t *testing.T, bm bullmq) {
		db, q := setup(t, bm.config())
		control, ours := runOps(t, bm, db, q,
			goOp(op{Op: "add", ID: "j1"}), op{Op: "add", ID: "j2"}, goOp(op{Op: "add", ID: "j3"}),
			op{Op: "add", ID: "j4"}, goOp(op{Op: "add", ID: "j5"}), op{Op: "add", ID: "j6"},
			goOp(op{Op: "pause"}), op{Op: "view"},
			goOp(op{Op: "add", ID: "j7"}), goOp(op{Op: "add", ID: "j8", Delay: 200}),
			op{Op: "sleep", Ms: 400}, goOp(op{Op: "promote"}), op{Op: "view"})
		require.Len(t, control, 2)
		require.Equal(t, int64(6), control[0].Counts.Waiting+control[0].Counts.Paused, "BullMQ's own pause")
		require.Equal(t, int64(8), control[1].Counts.Waiting+control[1].Counts.Paused, "BullMQ's own adds")
		require.Equal(t, control[0], ours[0], "after our pause")
		require.Equal(t, control[1], ours[1], "after our adds and promotion during the pause")
		c, err := q.Counts(testCtx(t))
		require.NoError(t, err)
		require.Equal(t, ours[1].Counts.ours(), c, "our counts are BullMQ's")
	})
}

// Jobs run in the order they were added across a pause that Go made and
// ended, with adds from both sides during it, as across BullMQ's own.
func TestInterop_OrderKeptAcrossOurPause(t *testing.T) {
	t.Parallel()
	eachBullMQ(t, func(t *testing.T, bm bullmq) {
		db, q := setup(t, bm.config())
		runOps(t, bm, db, q,
			goOp(op{Op: "add", ID: "j1"}), op{Op: "add", ID: "j2"}, goOp(op{Op: "add", ID: "j3"}),
			goOp(op{Op: "pause"}),
			op{Op: "add", ID: "j4"}, goOp(op{Op: "add", ID: "j5"}), op{Op: "add", ID: "j6"},
			goOp(op{Op: "resume"}))
		served := func(name string) []string {
			var out nodeProcessed
			bm.bull(t, db, "process", map[string]any{"queue": name, "count": 6, "timeoutMs": 10000}, &out)
			var ids []string
			for _, j := range out.Processed {
				ids = append(ids, j.ID)
			}
			return ids
		}
		control := served(controlQueue)
		require.Equal(t, []string{"j1", "j2", "j3", "j4", "j5", "j6"}, control, "BullMQ's own order")
		require.Equal(t, control, served(q.Name()))
	})
}

// wake runs interop.js's wake scenario: a BullMQ worker waits on a paused
// queue, and resume (nil: BullMQ resumes) ends the pause once it waits.
func (bm bullmq) wake(t *testing.T, db *livetest.ValkeyDB, name string, count int, resume func()) (firstMs int64, ids []string) {
	t.Helper()
	bin := bm.nodeBin(t)
	by := "go"
	if resume == nil {
		by = "node"
	}
	raw, err := json.Marshal(map[string]any{"queue": name, "count": count, "resumeBy": by, "timeoutMs": 10000})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, filepath.Join("testdata", "interop.js"), "wake", db.URL, string(raw))
	cmd.Env = nodeEnv(t, bm.dir)
	var stderr logtest.Buffer // read while the process may still write it
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	r := bufio.NewReader(stdout)
	line, err := r.ReadString('\n')
	require.NoError(t, err, "bullmq %d wake: %s", bm.major, stderr.String())
	require.Equal(t, "ready\n", line)
	if resume != nil {
		resume()
	}
	rest, err := r.ReadString('\n')
	require.NoError(t, err, "bullmq %d wake: %s", bm.major, stderr.String())
	require.NoError(t, cmd.Wait(), "bullmq %d wake: %s", bm.major, stderr.String())
	var out struct {
		FirstMs   *int64
		Processed []string
	}
	require.NoError(t, json.Unmarshal([]byte(strings.TrimSpace(rest)), &out), rest)
	require.NotNil(t, out.FirstMs, "no job ran within 10 s of the resume")
	return *out.FirstMs, out.Processed
}

// Go's resume wakes a BullMQ worker sleeping on the paused queue at once,
// as BullMQ's own resume does, for jobs BullMQ added during the pause. (A worker nobody wakes sleeps its drainDelay, 5 s by default.)
func TestInterop_OurResumeWakesBullMQWorkers(t *testing.T) {
	t.Parallel()
	eachBullMQ(t, func(t *testing.T, bm bullmq) {
		db, q := setup(t, bm.config())
		ctx := testCtx(t)
		// BullMQ adds during the pause: under BullMQ 6 they wait in wait,
		// where only the resume's marker tells a sleeping worker of them.
		runOps(t, bm, db, q, goOp(op{Op: "pause"}), op{Op: "add", ID: "j1"}, op{Op: "add", ID: "j2"})
		controlMs, controlIDs := bm.wake(t, db, controlQueue, 2, nil)
		oursMs, oursIDs := bm.wake(t, db, q.Name(), 2, func() { require.NoError(t, q.Resume(ctx)) })
		t.Logf("first job %d ms after BullMQ's resume, %d ms after ours", controlMs, oursMs)
		require.Equal(t, []string{"j1", "j2"}, controlIDs)
		require.Equal(t, controlIDs, oursIDs)
		require.Less(t, oursMs, int64(2000), "a worker woken by the resume, not by its drainDelay")
	})
}

// The move of a fleet from BullMQ 5 to 6 with a queue paused mid-way: a
// BullMQ 5 client declared and paused it (its ready jobs in the paused
// list), then a BullMQ 6 Queue is constructed on it. We follow 6's layout
// from then on: jobs added during the pause stay in wait, and our resume
// brings back the old paused list first, so every job runs once, in order.
func TestInterop_PausedQueueMovesFromBullMQ5To6(t *testing.T) {
	t.Parallel()
	v5, v6 := bullmqs[0], bullmqs[1]
	db, q := setup(t, v6.config())
	ctx := testCtx(t)
	for _, id := range []string{"j1", "j2"} {
		v5.bull(t, db, "add", map[string]any{"name": "pi", "opts": map[string]any{"jobId": id}}, nil)
	}
	v5.bull(t, db, "pause", nil, nil)
	_, _, err := q.Add(ctx, "pi", json.RawMessage(`{}`), queue.AddOptions{JobID: "j3"})
	require.NoError(t, err)
	c, err := q.Counts(ctx)
	require.NoError(t, err)
	require.Equal(t, queue.Counts{Paused: 3}, c, "BullMQ 5's layout while it declared the queue")
	l, err := q.Layout(ctx)
	require.NoError(t, err)
	require.Equal(t, queue.Layout5, l)

	v6.bull(t, db, "add", map[string]any{"name": "pi", "opts": map[string]any{"jobId": "j4"}}, nil)
	_, _, err = q.Add(ctx, "pi", json.RawMessage(`{}`), queue.AddOptions{JobID: "j5"})
	require.NoError(t, err)
	l, err = q.Layout(ctx)
	require.NoError(t, err)
	require.Equal(t, queue.Layout6, l, "a BullMQ 6 Queue declared it")
	c, err = q.Counts(ctx)
	require.NoError(t, err)
	require.Equal(t, queue.Counts{Paused: 3, Waiting: 2}, c)

	require.NoError(t, q.Resume(ctx))
	var out nodeProcessed
	v6.bull(t, db, "process", map[string]any{"count": 5, "timeoutMs": 10000}, &out)
	var ids []string
	for _, j := range out.Processed {
		ids = append(ids, j.ID)
	}
	require.Equal(t, []string{"j1", "j2", "j3", "j4", "j5"}, ids)
}

// A Go-only queue written in BullMQ 5's layout moves to 6's with
// SetLayout, paused or not, keeping its jobs and their order; BullMQ 6 then
// reads it as its own.
func TestSetLayout_MovesAPausedQueueTo6(t *testing.T) {
	t.Parallel()
	db := livetest.Valkey(t)
	ctx := testCtx(t)
	old, err := queue.New(db.Client, fleet.SharedQueue, queue.Config{Layout: queue.Layout5})
	require.NoError(t, err)
	require.NoError(t, old.Declare(ctx))
	for i := 1; i <= 3; i++ {
		add(t, old, queue.AddOptions{JobID: "j" + fmt.Sprint(i)})
	}
	require.NoError(t, old.Pause(ctx))
	add(t, old, queue.AddOptions{JobID: "j4"})
	require.Equal(t, queue.Counts{Paused: 4}, counts(t, old))

	// A host configured for 6 follows the queue's recorded layout, 5.
	q, err := queue.New(db.Client, fleet.SharedQueue, queue.Config{Layout: queue.Layout6})
	require.NoError(t, err)
	add(t, q, queue.AddOptions{JobID: "j5"})
	require.Equal(t, queue.Counts{Paused: 5}, counts(t, q))

	before, err := q.SetLayout(ctx, queue.Layout6)
	require.NoError(t, err)
	require.Equal(t, queue.Layout5, before)
	require.Equal(t, queue.Counts{Waiting: 5}, counts(t, q), "ready jobs of a paused queue wait in wait under 6")
	add(t, old, queue.AddOptions{JobID: "j6"}) // a host still configured for 5 follows the queue too
	require.Equal(t, queue.Counts{Waiting: 6}, counts(t, q))
	paused, err := q.IsPaused(ctx)
	require.NoError(t, err)
	require.True(t, paused, "the move keeps the pause")

	bm := bullmqs[1]
	var nc nodeCounts
	bm.bull(t, db, "counts", nil, &nc)
	require.Equal(t, queue.Counts{Waiting: 6}, nc.ours())

	require.NoError(t, q.Resume(ctx))
	for i := 1; i <= 6; i++ {
		require.Equal(t, "j"+fmt.Sprint(i), fetch(t, q, "t").ID)
	}
	again, err := q.SetLayout(ctx, queue.Layout6)
	require.NoError(t, err)
	require.Equal(t, queue.Layout6, again)
}
