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
	"github.com/pidispatch/pidispatch/internal/livetest"
	"github.com/pidispatch/pidispatch/jobs"
	"github.com/pidispatch/pidispatch/queue"
)

// The Bull Board recipe of docs/queue.md, tested: Bull Board's BullMQ
// adapter (@bull-board/api, pinned by testdata/bullboard/package-lock.json),
// pointed at the fleet's queues, lists the jobs our queue wrote in the states
// it holds them in. testdata/bullboard/list.js calls the route the board's UI
// reads (/api/queues) and prints what it answers.

const bullBoardDir = "testdata/bullboard"

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

// bullBoard runs list.js over the named queues of db.
func bullBoard(t *testing.T, db *livetest.ValkeyDB, names ...string) map[string]boardQueue {
	t.Helper()
	bin, err := exec.LookPath("node")
	if err != nil {
		if livetest.Required() {
			t.Fatalf("node not found on PATH: %v", err)
		}
		t.Skip("node not found on PATH")
	}
	if _, err := os.Stat(filepath.Join(bullBoardDir, "node_modules", "@bull-board", "api", "package.json")); err != nil {
		if livetest.Required() {
			t.Fatal("run npm ci in queue/testdata/bullboard")
		}
		t.Skip("@bull-board/api not installed: run npm ci in queue/testdata/bullboard")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append([]string{filepath.Join(bullBoardDir, "list.js"), db.URL}, names...)...)
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
	db := livetest.Valkey(t)
	ctx := testCtx(t)
	shared, err := queue.New(db.Client, fleet.SharedQueue, queue.Config{})
	require.NoError(t, err)
	hostName := fleet.HostQueueName("alpha")
	host, err := queue.New(db.Client, hostName, queue.Config{})
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
	_, err = shared.Fail(ctx, "failed-1", tok, jobs.ReasonExit1, queue.FailOptions{NoRetry: true})
	require.NoError(t, err)
	takeNext(t, shared, "running-1")

	// A paused host queue: its new job sits in paused, as after `pi-dispatch pause`.
	require.NoError(t, host.Pause(ctx))
	_, _, err = host.Add(ctx, "pi", data, queue.AddOptions{JobID: "held-by-pause"})
	require.NoError(t, err)

	board := bullBoard(t, db, fleet.SharedQueue, hostName)

	s := board[fleet.SharedQueue]
	require.True(t, s.ReadOnlyMode)
	require.False(t, s.IsPaused)
	require.Equal(t, []string{"waiting-1", "waiting-2"}, boardIDs(s.Jobs["waiting"]))
	require.Equal(t, []string{"later-1"}, boardIDs(s.Jobs["delayed"]))
	require.Equal(t, []string{"running-1"}, boardIDs(s.Jobs["active"]))
	require.Equal(t, []string{"done-1"}, boardIDs(s.Jobs["completed"]))
	require.Equal(t, []string{"failed-1"}, boardIDs(s.Jobs["failed"]))
	require.Equal(t, jobs.ReasonExit1, s.Jobs["failed"][0].FailedReason)
	require.Equal(t, "pi", s.Jobs["waiting"][0].Name)

	c, err := shared.Counts(ctx)
	require.NoError(t, err)
	require.Equal(t, map[string]int64{
		"waiting": c.Waiting, "active": c.Active, "paused": c.Paused, "delayed": c.Delayed,
		"prioritized": c.Prioritized, "completed": c.Completed, "failed": c.Failed, "waiting-children": 0,
	}, s.Counts)

	h := board[hostName]
	require.True(t, h.IsPaused)
	require.Equal(t, []string{"held-by-pause"}, boardIDs(h.Jobs["paused"]))
	require.Equal(t, int64(1), h.Counts["paused"])
	// Its "waiting" tab shows a paused queue's backlog too, as BullMQ 5 lists it.
	require.Equal(t, []string{"held-by-pause"}, boardIDs(h.Jobs["waiting"]))
}
