package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/pidispatch/pidispatch/enqueue"
	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/internal/image/jobimage"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/internal/testkit/logtest"
	"github.com/pidispatch/pidispatch/jobs"
	"github.com/pidispatch/pidispatch/registry"
)

// The embedded worker boots on live Valkey and Docker, runs a job end to end,
// and shuts down cleanly when its context ends: Run returns nil, its registry
// row is gone, and no goroutine outlives it.
func TestRun_BootsRunsAJobAndStops(t *testing.T) {
	docker := livetest.Docker(t)
	db := livetest.Valkey(t)
	if err := jobimage.Ensure(context.Background(), docker, jobimage.TestTag); err != nil {
		t.Fatal(err)
	}
	logs, workspace := t.TempDir(), t.TempDir()
	if err := os.Chmod(workspace, 0o777); err != nil { // the job runs as an unprivileged root
		t.Fatal(err)
	}
	const name = "embed-example-1"
	vars := map[string]string{
		"VALKEY_URL": db.URL, "PI_UNSIGNED_QUEUES": "*",
		"PI_WORKER_NAME": name,
		"PI_JOB_IMAGE":   jobimage.TestTag,
		"PI_LOGS_DIR":    logs,
		"PI_JOB_TIMEOUT": "1m",
		// The one folder its job may work in; the tests run as whoever
		// owns it (root in a container), so the user is said explicitly.
		"PI_FOLDER_ROOTS":   workspace,
		"PI_CONTAINER_USER": "owner",
	}
	before := runtime.NumGoroutine()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var stderr logtest.Buffer
	done := make(chan error, 1)
	go func() { done <- run(ctx, func(k string) string { return vars[k] }, &stderr) }()

	waitFor(t, &stderr, `"msg":"worker_started"`)
	if !strings.Contains(stderr.String(), `"service":"embed-worker"`) {
		t.Fatalf("the service's own logger is not used:\n%s", stderr.String())
	}

	p, err := enqueue.NewProducer(db.Client, enqueue.ProducerConfig{UnsignedQueues: []string{fleet.EveryQueue}, WorkerName: name, WorkerNameDeclared: true, Attempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	got, err := p.EnqueueLocal(ctx, jobs.Job{Kind: jobs.KindLocal, Folder: workspace, Flow: "default", Task: "hi\nJOB_WRITE_FILE=out.txt"})
	if err != nil {
		t.Fatal(err)
	}
	recPath := filepath.Join(logs, jobs.RecordName(got.Queue, got.JobID, 1))
	var rec jobs.Record
	for deadline := time.Now().Add(45 * time.Second); ; {
		if raw, err := os.ReadFile(recPath); err == nil {
			if err := json.Unmarshal(raw, &rec); err != nil {
				t.Fatal(err)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no run record for %s; worker said:\n%s", got.JobID, stderr.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	if rec.Outcome != jobs.OutcomeCompleted || rec.Host != name {
		t.Fatalf("record %+v", rec)
	}
	if _, err := os.Stat(filepath.Join(workspace, "out.txt")); err != nil {
		t.Fatalf("the job did not write its file: %v", err)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run: %v", err)
		}
	case <-time.After(40 * time.Second):
		t.Fatal("run did not return after its context ended")
	}
	if !strings.Contains(stderr.String(), `"msg":"worker_stopped"`) {
		t.Fatalf("no worker_stopped:\n%s", stderr.String())
	}
	n, err := db.Client.Exists(context.Background(), registry.HostKey(name)).Result()
	if err != nil || n != 0 {
		t.Fatalf("registry row still there after shutdown (exists=%d, err=%v)", n, err)
	}
	for deadline := time.Now().Add(10 * time.Second); runtime.NumGoroutine() > before && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		t.Fatalf("%d goroutines after run returned, %d before", n, before)
	}
}

// A bad configuration refuses boot with the variable named, before anything
// connects.
func TestRun_RefusesBadConfig(t *testing.T) {
	var stderr logtest.Buffer
	err := run(context.Background(), func(k string) string {
		if k == "PI_CONCURRENCY" {
			return "lots"
		}
		return ""
	}, &stderr)
	if err == nil || !strings.Contains(err.Error(), "PI_CONCURRENCY") {
		t.Fatalf("err = %v", err)
	}
}

func waitFor(t *testing.T, b *logtest.Buffer, want string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(b.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within 30s:\n%s", want, b.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}
