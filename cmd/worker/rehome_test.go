package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/enqueue"
	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/jobs"
	"github.com/pidispatch/pidispatch/queue"
)

// A forge job that needs only a profile and sits on the queue of a host whose
// row expired is moved to a live capable host and runs there; a folder job on
// the same dead queue stays put.
func TestRehomeStrandedProfileJob(t *testing.T) {
	t.Parallel()
	ensureImage(t)
	db := livetest.Valkey(t)
	resolver := filepath.Join(t.TempDir(), "resolve-prod")
	if err := os.WriteFile(resolver, []byte("#!/bin/sh\necho TOKEN=rehome-secret\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	ra, rb := uniqueName("ra", db), uniqueName("rb", db)
	a := bootWorker(t, testEnv(t, db.URL, map[string]string{"PI_WORKER_NAME": ra}), dispatch.Tuning{})
	b := bootWorker(t, testEnv(t, db.URL, map[string]string{"PI_WORKER_NAME": rb, "PI_SECRET_PROFILES": "prod:" + resolver}), dispatch.Tuning{})
	waitLive(t, db, ra, rb)

	ctx := context.Background()
	dead, err := queue.New(db.Client, fleet.HostQueueName("rc"), queue.Config{})
	if err != nil {
		t.Fatal(err)
	}
	forge, _ := json.Marshal(jobs.Job{Kind: jobs.KindForge, Repo: "acme/web", Ref: "main", Flow: "fix", Task: "t", SecretsProfile: "prod"})
	local, _ := json.Marshal(jobs.Job{Kind: jobs.KindLocal, Folder: t.TempDir(), Flow: "fix", Task: "t"})
	if _, _, err := dead.Add(ctx, enqueue.JobName, forge, queue.AddOptions{JobID: "gh-stranded-1"}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := dead.Add(ctx, enqueue.JobName, local, queue.AddOptions{JobID: "local-stays-1"}); err != nil {
		t.Fatal(err)
	}

	moved, err := a.stack.Worker.Rehome(ctx)
	if err != nil || moved != 1 {
		t.Fatalf("Rehome moved %d (%v), want 1", moved, err)
	}
	rec := waitRecord(t, b.cfg.LogsDir, "gh-stranded-1", 60*time.Second)
	if rec.Host != rb || rec.Outcome != jobs.OutcomeCompleted {
		t.Fatalf("re-homed job record %+v", rec)
	}
	if !strings.Contains(a.logs.String(), `"msg":"job_rehomed"`) || !strings.Contains(a.logs.String(), `"to":"pi-jobs@`+rb+`"`) {
		t.Fatalf("no job_rehomed line to pi-jobs@%s in:\n%s", rb, a.logs.String())
	}
	if j, err := dead.Get(ctx, "local-stays-1"); err != nil || j.State != queue.StateWaiting {
		t.Fatalf("folder job must stay on its host's queue: %+v %v", j, err)
	}
	// A second pass finds nothing more to move.
	if moved, err := b.stack.Worker.Rehome(ctx); err != nil || moved != 0 {
		t.Fatalf("second pass moved %d (%v)", moved, err)
	}
}

// waitLive waits until every named host has a registry row.
func waitLive(t *testing.T, db *livetest.ValkeyDB, names ...string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		n := 0
		for _, name := range names {
			if ok, _ := db.Client.Exists(context.Background(), "host:h:"+name).Result(); ok == 1 {
				n++
			}
		}
		if n == len(names) {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("hosts %v did not all publish a registry row", names)
}
