package queue_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/jobs"
	"github.com/pidispatch/pidispatch/queue"
)

// The Bull Board recipe of docs/queue.md, tested: Bull Board's BullMQ
// adapter (@bull-board/api, pinned by testdata/bullboard/package-lock.json
// over BullMQ 5 and testdata/bullboard6/package-lock.json over BullMQ 6),
// pointed at the fleet's queues, lists the jobs our queue wrote in the states
// it holds them in. testdata/bullboard.js calls the route the board's UI
// reads (/api/queues) and prints what it answers.

type boardJob struct {
	ID           string `json:"id"`
	Name         string `json:"name"`
	FailedReason string `json:"failedReason"`
}

type boardQueue struct {
	Counts       map[string]int64      `json:"counts"`
	IsPaused     bool                  `json:"isPaused"`
	ReadOnlyMode bool                  `json:"readOnlyMode"`
	Jobs         map[string][]boardJob `json:"jobs"`
}

// bullBoard runs bullboard.js, over bm's Bull Board, on the named queues of db.
func bullBoard(t *testing.T, bm bullmq, db *livetest.ValkeyDB, names ...string) map[string]boardQueue {
	t.Helper()
	bin, err := exec.LookPath("node")
	if err != nil {
		if livetest.Required() {
			t.Fatalf("node not found on PATH: %v", err)
		}
		t.Skip("node not found on PATH")
	}
	if _, err := os.Stat(filepath.Join(bm.boardDir, "node_modules", "@bull-board", "api", "package.json")); err != nil {
		if livetest.Required() {
			t.Fatalf("run npm ci in queue/%s", bm.boardDir)
		}
		t.Skipf("@bull-board/api not installed: run npm ci in queue/%s", bm.boardDir)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append([]string{filepath.Join("testdata", "bullboard.js"), db.URL}, names...)...)
	cmd.Env = nodeEnv(t, bm.boardDir)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), "bull board: %s", stderr.String())
	var out map[string]boardQueue
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &out), "bull board output %q", stdout.String())
	return out
}

func boardIDs(js []boardJob) []string {
	ids := make([]string, len(js))
	for i, j := range js {
		ids[i] = j.ID
	}
	slices.Sort(ids)
	return ids
}

// takeNext fetches q's next job and requires it is id.
func takeNext(t *testing.T, q *queue.Queue, id string) string {
	t.Helper()
	tok := queue.NewToken()
	j, err := q.Fetch(context.Background(), tok)
	require.NoError(t, err)
	require.NotNil(t, j)
	require.Equal(t, id, j.ID)
	return tok
}

func TestBullBoardListsTheFleetsJobsAndStates(t *testing.T) {
	t.Parallel()
	eachBullMQ(t, func(t *testing.T, bm bullmq) {
		db := livetest.Valkey(t)
		ctx := testCtx(t)
		shared, err := queue.New(db.Client, fleet.SharedQueue, bm.config())
		require.NoError(t, err)
		hostName := fleet.HostQueueName("alpha")
		host, err := queue.New(db.Client, hostName, bm.config())
		require.NoError(t, err)
		require.NoError(t, host.Declare(ctx))
		data := json.RawMessage(`{"kind":"manual"}`)
		for _, id := range []string{"done-1", "failed-1", "running-1", "waiting-1", "waiting-2"} {
			_, added, err := shared.Add(ctx, "pi", data, queue.AddOptions{JobID: id})
			require.NoError(t, err)
			require.True(t, added)
		}
		_, _, err = shared.Add(ctx, "pi", data, queue.AddOptions{JobID: "later-1", Delay: time.Hour})
		require.NoError(t, err)

		tok := takeNext(t, shared, "done-1")
		require.NoError(t, shared.Complete(ctx, "done-1", tok, json.RawMessage(`{"outcome":"completed"}`)))
		tok = takeNext(t, shared, "failed-1")
		_, err = shared.Fail(ctx, "failed-1", tok, string(jobs.ReasonExit1), queue.FailOptions{NoRetry: true})
		require.NoError(t, err)
		takeNext(t, shared, "running-1")

		// A paused host queue, as after `pi-dispatch pause`: one job that was
		// ready before the pause, one added during it. The BullMQ-only
		// control queue has the same, paused and added by BullMQ.
		_, _, err = host.Add(ctx, "pi", data, queue.AddOptions{JobID: "before-pause"})
		require.NoError(t, err)
		require.NoError(t, host.Pause(ctx))
		_, _, err = host.Add(ctx, "pi", data, queue.AddOptions{JobID: "held-by-pause"})
		require.NoError(t, err)
		const control = "control"
		bm.bull(t, db, "add", map[string]any{"queue": control, "name": "pi", "opts": map[string]any{"jobId": "before-pause"}}, nil)
		bm.bull(t, db, "pause", map[string]any{"queue": control}, nil)
		bm.bull(t, db, "add", map[string]any{"queue": control, "name": "pi", "opts": map[string]any{"jobId": "held-by-pause"}}, nil)

		board := bullBoard(t, bm, db, fleet.SharedQueue, hostName, control)

		s := board[fleet.SharedQueue]
		require.True(t, s.ReadOnlyMode)
		require.False(t, s.IsPaused)
		require.Equal(t, []string{"waiting-1", "waiting-2"}, boardIDs(s.Jobs["waiting"]))
		require.Equal(t, []string{"later-1"}, boardIDs(s.Jobs["delayed"]))
		require.Equal(t, []string{"running-1"}, boardIDs(s.Jobs["active"]))
		require.Equal(t, []string{"done-1"}, boardIDs(s.Jobs["completed"]))
		require.Equal(t, []string{"failed-1"}, boardIDs(s.Jobs["failed"]))
		require.Equal(t, string(jobs.ReasonExit1), s.Jobs["failed"][0].FailedReason)
		require.Equal(t, "pi", s.Jobs["waiting"][0].Name)

		c, err := shared.Counts(ctx)
		require.NoError(t, err)
		want := map[string]int64{
			"waiting": c.Waiting, "active": c.Active, "paused": c.Paused, "delayed": c.Delayed,
			"prioritized": c.Prioritized, "completed": c.Completed, "failed": c.Failed, "waiting-children": 0,
		}
		if _, ok := s.Counts["paused"]; !ok && bm.major >= 6 {
			delete(want, "paused") // Bull Board over BullMQ 6 counts no paused list
		}
		require.Equal(t, want, s.Counts)

		// The paused queue shows as the control does: every count, and the
		// same jobs in every tab (BullMQ 5 lists them under paused, 6
		// under waiting).
		h, ctl := board[hostName], board[control]
		require.True(t, h.IsPaused)
		require.True(t, ctl.IsPaused)
		require.Equal(t, ctl.Counts, h.Counts)
		require.Equal(t, int64(2), h.Counts["waiting"]+h.Counts["paused"])
		for state, js := range ctl.Jobs {
			require.ElementsMatch(t, boardIDs(js), boardIDs(h.Jobs[state]), state)
		}
	})
}
