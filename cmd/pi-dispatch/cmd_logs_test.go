package main

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pidispatch/pidispatch/enqueue"
	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest/liveworker"
	"github.com/pidispatch/pidispatch/internal/testkit/logtest"
	"github.com/pidispatch/pidispatch/jobs"
)

// `logs --follow` on another host (its own, empty logs folder) shows a
// running job's lines while it runs and ends with its attempt; once it
// ended, `logs` on the worker's host renders the stored transcript and
// `logs --json` prints entries.
func TestLogsFollowRunningJobFromAnotherHost(t *testing.T) {
	db := livetest.Valkey(t)
	logs := liveworker.Boot(t, db, "logs-host-a", nil).LogsDir
	p, err := enqueue.NewProducer(db.Client, enqueue.ProducerConfig{UnsignedQueues: []string{fleet.EveryQueue}, WorkerName: "logs-host-a", WorkerNameDeclared: true, Attempts: 1})
	require.NoError(t, err)
	e, err := p.EnqueueLocal(context.Background(), jobs.Job{Folder: t.TempDir(), Flow: "fix", Task: "JOB_SLEEP=4s\nJOB_EXIT_CODE=1"})
	require.NoError(t, err)

	other := map[string]string{"VALKEY_URL": db.URL, "PI_UNSIGNED_QUEUES": "*", "PI_WORKER_NAME": "logs-host-b", "PI_LOGS_DIR": t.TempDir()}
	out, errOut := &logtest.Buffer{}, &logtest.Buffer{}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	code := make(chan int, 1)
	go func() {
		code <- run(ctx, []string{"logs", e.JobID, "--follow", "--env-file", ""}, func(k string) string { return other[k] }, out, errOut)
	}()
	require.Eventually(t, func() bool { return strings.Contains(out.String(), "hello from the pidispatch test job") },
		60*time.Second, 50*time.Millisecond, "stderr: %s", errOut.String())
	recs, _ := jobs.ReadRecords(logs, e.JobID)
	require.Empty(t, recs, "the job had ended before its lines showed")
	select {
	case c := <-code:
		require.Equal(t, exitOK, c, errOut.String())
	case <-ctx.Done():
		t.Fatal("logs --follow did not end with the attempt")
	}
	require.Contains(t, out.String(), `exit {"event":"exit"`)

	require.Eventually(t, func() bool { recs, _ := jobs.ReadRecords(logs, e.JobID); return len(recs) == 1 }, 30*time.Second, 100*time.Millisecond)
	here := map[string]string{"VALKEY_URL": db.URL, "PI_UNSIGNED_QUEUES": "*", "PI_LOGS_DIR": logs}
	var stored, js strings.Builder
	require.Equal(t, exitOK, run(context.Background(), []string{"logs", e.JobID, "--env-file", ""}, func(k string) string { return here[k] }, &stored, io.Discard))
	require.Contains(t, stored.String(), "hello from the pidispatch test job")
	require.Contains(t, stored.String(), "-- 0 turns")
	require.Equal(t, exitOK, run(context.Background(), []string{"logs", e.JobID, "--attempt", "1", "--json", "--env-file", ""}, func(k string) string { return here[k] }, &js, io.Discard))
	require.Contains(t, js.String(), `"k":"out"`)

	var none, noneErr strings.Builder
	require.Equal(t, exitFailure, run(context.Background(), []string{"logs", "no-such-job", "--env-file", ""}, func(k string) string { return other[k] }, &none, &noneErr))
	require.Contains(t, noneErr.String(), "no transcript of job no-such-job")
}

// Following a job no queue has and no transcript names ends at once, saying
// so, instead of waiting forever and printing an empty summary.
func TestLogsFollowUnknownJobSaysSoAtOnce(t *testing.T) {
	db := livetest.Valkey(t)
	r := runCLI(t, map[string]string{"VALKEY_URL": db.URL, "PI_UNSIGNED_QUEUES": "*", "PI_LOGS_DIR": t.TempDir()}, "logs", "no-such-job-1", "--follow")
	if r.code != exitFailure || !strings.Contains(r.stderr, "no job no-such-job-1 on any queue") || strings.Contains(r.stdout, "turns") {
		t.Fatalf("%+v", r)
	}
}
