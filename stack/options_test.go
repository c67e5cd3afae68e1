package stack_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pidispatch/pidispatch/config"
	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/dispatch/container"
	"github.com/pidispatch/pidispatch/enqueue"
	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/jobs"
	"github.com/pidispatch/pidispatch/stack"
)

// scriptedRuntime stands in for Docker: every job exits 0 at once.
type scriptedRuntime struct {
	mu   sync.Mutex
	runs []string
}

func (r *scriptedRuntime) Run(_ context.Context, spec container.Spec) (container.Result, error) {
	r.mu.Lock()
	r.runs = append(r.runs, spec.JobID)
	r.mu.Unlock()
	now := time.Now()
	return container.Result{Container: "scripted-" + spec.JobID, ExitCode: 0, StartedAt: now, EndedAt: now}, nil
}

func (r *scriptedRuntime) Reap(context.Context, string) (container.ReapReport, error) {
	return container.ReapReport{Enumerated: true}, nil
}

func (r *scriptedRuntime) ImagePresent(context.Context, string) (bool, error) { return true, nil }

func (r *scriptedRuntime) ImageDigest(context.Context, string) (string, error) { return "", nil }

func (r *scriptedRuntime) ran() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.runs...)
}

// An Option replaces a part of the real stack: here the container runtime,
// while queues, budget and records stay the real ones.
func TestBuildOptionReplacesAPart(t *testing.T) {
	db := livetest.Valkey(t)
	name := fmt.Sprintf("opt-%d", db.DB)
	env := map[string]string{"VALKEY_URL": db.URL, "PI_UNSIGNED_QUEUES": "*", "PI_WORKER_NAME": name, "PI_LOGS_DIR": t.TempDir(), "PI_JOB_IMAGE": "never-pulled:1",
		"PI_FOLDER_ROOTS": os.TempDir(), "PI_CONTAINER_USER": "owner"}
	cfg, err := config.Load(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	rt := &scriptedRuntime{}
	logger := slog.New(slog.DiscardHandler)
	s, err := stack.Build(context.Background(), cfg, logger, dispatch.Tuning{JobsDir: t.TempDir()},
		func(d *dispatch.Deps) { d.Runtime = rt })
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Worker.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()

	p, err := enqueue.NewProducer(db.Client, enqueue.ProducerConfig{UnsignedQueues: []string{fleet.EveryQueue}, WorkerName: name, WorkerNameDeclared: true})
	if err != nil {
		t.Fatal(err)
	}
	e, err := p.EnqueueLocal(ctx, jobs.Job{Folder: t.TempDir(), Flow: "fix", Task: "t"})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		recs, _ := jobs.ReadRecords(cfg.LogsDir, e.JobID)
		if len(recs) == 1 {
			if recs[0].Outcome != jobs.OutcomeCompleted {
				t.Fatalf("record %+v", recs[0])
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no record of %s", e.JobID)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if got := rt.ran(); len(got) != 1 || got[0] != e.JobID {
		t.Fatalf("the replaced runtime ran %v, want [%s]", got, e.JobID)
	}
}

// A worker whose PI_JOB_IMAGE is not on the host says so at boot, before
// any job is refused for it.
func TestBuildSaysTheJobImageIsMissing(t *testing.T) {
	livetest.Docker(t)
	db := livetest.Valkey(t)
	env := map[string]string{"VALKEY_URL": db.URL, "PI_UNSIGNED_QUEUES": "*", "PI_WORKER_NAME": fmt.Sprintf("img-%d", db.DB), "PI_LOGS_DIR": t.TempDir(), "PI_JOB_IMAGE": "never-pulled:1"}
	cfg, err := config.Load(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	var logs strings.Builder
	s, err := stack.Build(context.Background(), cfg, slog.New(slog.NewTextHandler(&logs, nil)), dispatch.Tuning{JobsDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if out := logs.String(); !strings.Contains(out, "msg=job_image_missing") || !strings.Contains(out, "image=never-pulled:1") {
		t.Fatalf("boot did not say the job image is missing:\n%s", out)
	}
}
