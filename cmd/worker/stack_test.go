package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pidispatch/pidispatch/config"
	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/enqueue"
	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/internal/image/jobimage"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/internal/testkit/logtest"
	"github.com/pidispatch/pidispatch/internal/testkit/recordtest"
	"github.com/pidispatch/pidispatch/jobs"
	wiring "github.com/pidispatch/pidispatch/stack"
)

// testEnv is the environment of one worker under test.
func testEnv(t *testing.T, valkeyURL string, extra map[string]string) func(string) string {
	t.Helper()
	env := map[string]string{
		"VALKEY_URL": valkeyURL, "PI_UNSIGNED_QUEUES": "*",
		"PI_JOB_IMAGE":  jobimage.TestTag,
		"PI_LOGS_DIR":   t.TempDir(),
		"PI_JOB_MEMORY": "256m",
		"PI_JOB_CPUS":   "0.5",
		// Folder jobs work in the tests' temporary folders, owned by
		// whoever runs the tests (root in a container).
		"PI_FOLDER_ROOTS":   os.TempDir(),
		"PI_CONTAINER_USER": "owner",
	}
	for k, v := range extra {
		env[k] = v
	}
	return func(k string) string { return env[k] }
}

type bootedWorker struct {
	stack  *stack
	cfg    config.Config
	logs   *logtest.Buffer
	cancel context.CancelFunc
	done   chan error
}

// bootWorker builds the real stack from env, with opts, and runs it until
// the test ends.
func bootWorker(t *testing.T, getenv func(string) string, tune dispatch.Tuning, opts ...wiring.Option) *bootedWorker {
	t.Helper()
	cfg, err := config.Load(getenv)
	if err != nil {
		t.Fatal(err)
	}
	// Two undeclared workers in one test process would share the hostname's
	// default name; a test gives each its own, still undeclared.
	if name := getenv("TEST_DEFAULT_NAME"); name != "" && !cfg.WorkerNameDeclared {
		cfg.WorkerName = name
	}
	logs := &logtest.Buffer{}
	logger := slog.New(slog.NewJSONHandler(io.MultiWriter(logs, testWriter{t}), nil))
	if tune.JobsDir == "" {
		tune.JobsDir = t.TempDir()
	}
	s, err := buildStack(context.Background(), cfg, logger, tune, opts...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	b := &bootedWorker{stack: s, cfg: cfg, logs: logs, cancel: cancel, done: make(chan error, 1)}
	go func() { b.done <- s.Worker.Run(ctx) }()
	t.Cleanup(func() { b.stop(t) })
	return b
}

func (b *bootedWorker) stop(t *testing.T) {
	b.cancel()
	select {
	case err := <-b.done:
		if err != nil {
			t.Errorf("worker %s: Run: %v", b.cfg.WorkerName, err)
		}
		b.done <- nil
	case <-time.After(60 * time.Second):
		t.Errorf("worker %s did not stop", b.cfg.WorkerName)
	}
	b.stack.Close()
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	if testing.Verbose() {
		w.t.Logf("%s", strings.TrimSpace(string(p)))
	}
	return len(p), nil
}

// waitRecord waits for a run record of jobID in dir and returns its latest
// attempt's.
func waitRecord(t *testing.T, dir, jobID string, timeout time.Duration) jobs.Record {
	t.Helper()
	return recordtest.Wait(t, dir, jobID, timeout)
}

func ensureImage(t *testing.T) {
	t.Helper()
	dc := livetest.Docker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := jobimage.Ensure(ctx, dc, jobimage.TestTag); err != nil {
		t.Fatal(err)
	}
}

// A local job runs in a container through the real stack; its record lands
// with host, outcome and telemetry.
func TestLocalJobRunsAndRecords(t *testing.T) {
	t.Parallel()
	ensureImage(t)
	db := livetest.Valkey(t)
	name := uniqueName("alpha", db)
	getenv := testEnv(t, db.URL, map[string]string{"PI_WORKER_NAME": name})
	w := bootWorker(t, getenv, dispatch.Tuning{})

	folder := t.TempDir()
	p, err := enqueue.NewProducer(db.Client, enqueue.ProducerConfig{UnsignedQueues: []string{fleet.EveryQueue}, WorkerName: name, WorkerNameDeclared: true})
	if err != nil {
		t.Fatal(err)
	}
	e, err := p.EnqueueLocal(context.Background(), jobs.Job{Folder: folder, Flow: "fix", Task: "JOB_PRINT_EXIT_LINE=1\nJOB_WRITE_FILE=done.txt"})
	if err != nil {
		t.Fatal(err)
	}
	if e.Queue != "pi-jobs@"+name || !e.Added {
		t.Fatalf("enqueued %+v, want a new job on pi-jobs@%s", e, name)
	}
	rec := waitRecord(t, w.cfg.LogsDir, e.JobID, 60*time.Second)
	if rec.Outcome != jobs.OutcomeCompleted || rec.Reason != jobs.ReasonCompleted || rec.Host != name {
		t.Fatalf("record %+v", rec)
	}
	if rec.ExitCode == nil || *rec.ExitCode != 0 {
		t.Fatalf("exit code %v", rec.ExitCode)
	}
	var tel struct{ Turns, Tokens int }
	if err := json.Unmarshal(rec.Telemetry, &tel); err != nil || tel.Turns != 3 || tel.Tokens != 1234 {
		t.Fatalf("telemetry %s (%v)", rec.Telemetry, err)
	}
	if _, err := os.Stat(filepath.Join(folder, "done.txt")); err != nil {
		t.Fatalf("the job did not write into its folder: %v", err)
	}
}
