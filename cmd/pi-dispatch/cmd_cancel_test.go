package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/fleetstate"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/jobs"
	"github.com/pidispatch/pidispatch/queue"
)

func TestCancelQueuedGolden(t *testing.T) {
	db := livetest.Valkey(t)
	ctx := context.Background()
	shared := newQueue(t, db.Client, fleet.SharedQueue)
	host := newQueue(t, db.Client, fleet.HostQueueName("alpha"))
	add(t, shared, "w1", queue.AddOptions{})
	add(t, host, "d1", queue.AddOptions{Delay: time.Hour})
	env := vars(db.URL)

	expect(t, runCLI(t, env, "cancel", "w1"), db.URL, 0,
		"cancelled w1: removed from pi-jobs (it was waiting)\n  recorded as attempt 1, policy/operator-cancel, in the run mirror\n", "")
	expect(t, runCLI(t, env, "cancel", "w1"), db.URL, 1, "", "no job w1 on any queue — nothing changed\n")
	logs := t.TempDir()
	env["PI_LOGS_DIR"], env["PI_WORKER_NAME"] = logs, "ops-1"
	expect(t, runCLI(t, env, "cancel", "d1"), db.URL, 0,
		"cancelled d1: removed from pi-jobs@alpha (it was delayed)\n  recorded as attempt 1, policy/operator-cancel, in "+
			filepath.Join(logs, jobs.RecordName("pi-jobs@alpha", "d1", 1))+" and the run mirror\n", "")
	if recs, err := jobs.ReadRecords(logs, "d1"); err != nil || len(recs) != 1 || recs[0].Host != "ops-1" || recs[0].Reason != jobs.ReasonOperatorCancel {
		t.Fatalf("cancel's record: %+v %v", recs, err)
	}

	// Finished and scheduler runs: nothing changes, exit 1.
	add(t, shared, "f1", queue.AddOptions{})
	tok := queue.NewToken()
	if j, err := shared.Fetch(ctx, tok); err != nil || j == nil {
		t.Fatal(j, err)
	}
	if _, err := shared.Fail(ctx, "f1", tok, "boom", queue.FailOptions{}); err != nil {
		t.Fatal(err)
	}
	expect(t, runCLI(t, env, "cancel", "f1"), db.URL, 1, "", "job f1 already finished (failed) on pi-jobs — nothing changed\n")
	runID, err := host.UpsertScheduler(ctx, "nightly", queue.Scheduler{Pattern: "0 3 * * *", JobName: "j", Data: json.RawMessage(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	expect(t, runCLI(t, env, "cancel", runID), db.URL, 1, "",
		"job "+runID+" is the pending run of scheduler nightly on pi-jobs@alpha — nothing changed; remove the trigger (its cron entry) to stop it\n")
}

// fetchAsWorker adds a job to alpha's queue and takes it, as the worker that
// runs it would.
func fetchAsWorker(t *testing.T, q *queue.Queue, id string) {
	t.Helper()
	add(t, q, id, queue.AddOptions{})
	if j, err := q.Fetch(context.Background(), queue.NewToken()); err != nil || j == nil || j.ID != id {
		t.Fatalf("fetch: %v %v", j, err)
	}
}

func TestCancelRunningGolden(t *testing.T) {
	db := livetest.Valkey(t)
	ctx := context.Background()
	host := newQueue(t, db.Client, fleet.HostQueueName("alpha"))
	fetchAsWorker(t, host, "r1")
	w, err := fleetstate.NewCancelWatcher(db.Client, "alpha", fleetstate.CancelWatcherConfig{Poll: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	wctx, stopWatcher := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	defer func() {
		stopWatcher()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	jobCtx, stopJob := context.WithCancel(ctx)
	var called atomic.Bool
	defer w.Watch(jobCtx, "r1", func() { called.Store(true); stopJob() })()

	expect(t, runCLI(t, vars(db.URL), "cancel", "r1"), db.URL, 0,
		"cancelled r1: stopped on host alpha (pi-jobs@alpha); its run record says operator-cancel\n", "")
	if !called.Load() || jobCtx.Err() == nil || !w.Cancelled("r1") {
		t.Fatal("the worker's job was not stopped")
	}

	// No worker watches r2: the request is withdrawn after --wait.
	fetchAsWorker(t, host, "r2")
	start := time.Now()
	expect(t, runCLI(t, vars(db.URL), "cancel", "--wait", "1s", "r2"), db.URL, 1, "",
		"no worker acknowledged the cancel of running job r2 on pi-jobs@alpha within 1s — request withdrawn, nothing changed\n")
	if el := time.Since(start); el < time.Second || el > 10*time.Second { // waits its second, and no hang
		t.Fatalf("waited %s", el)
	}
	// The flag may follow the id too.
	expect(t, runCLI(t, vars(db.URL), "cancel", "r2", "--wait=300ms"), db.URL, 1, "",
		"no worker acknowledged the cancel of running job r2 on pi-jobs@alpha within 300ms — request withdrawn, nothing changed\n")
}

func TestCancelUsage(t *testing.T) {
	for _, tc := range []struct {
		args   []string
		stderr string
	}{
		{[]string{"cancel"}, "pi-dispatch cancel: want exactly one job id, got 0 (usage: pi-dispatch cancel [--wait 10s] <jobId>)\n"},
		{[]string{"cancel", "a", "b"}, "pi-dispatch cancel: want exactly one job id, got 2 (usage: pi-dispatch cancel [--wait 10s] <jobId>)\n"},
		{[]string{"cancel", "--wait", "0s", "a"}, "pi-dispatch cancel: --wait must be positive (usage: pi-dispatch cancel [--wait 10s] <jobId>)\n"},
		{[]string{"cancel", "--wait", "soon", "a"}, "pi-dispatch cancel: invalid value \"soon\" for flag -wait: parse error (usage: pi-dispatch cancel [--wait 10s] <jobId>)\n"},
		{[]string{"cancel", "a\x00b"}, "pi-dispatch cancel: invalid job id: contains control character U+0000\n"},
	} {
		// A dead port: usage errors must be found before any connection.
		r := runCLI(t, map[string]string{"VALKEY_URL": "redis://127.0.0.1:1/0", "PI_UNSIGNED_QUEUES": "*"}, tc.args...)
		expect(t, r, "", exitUsage, "", tc.stderr)
	}
}
