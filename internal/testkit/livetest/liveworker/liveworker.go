// Package liveworker boots a real worker (the stack cmd/worker builds) for a
// live test: the test job image, a Valkey database of livetest, and a
// cleanup that stops it when the test ends.
package liveworker

import (
	"context"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/pidispatch/pidispatch/config"
	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/internal/image/jobimage"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/stack"
)

// Worker is a running worker.
type Worker struct {
	*stack.Stack
	// Name is its PI_WORKER_NAME.
	Name string
	// LogsDir is its PI_LOGS_DIR.
	LogsDir string
}

// Boot builds the test job image when it is missing and runs a worker named
// name on db until the test ends. env adds to or overrides its defaults
// (the test image, a fresh logs folder, 256m and half a CPU per job,
// folder jobs under the temporary folder, run as root).
func Boot(t testing.TB, db *livetest.ValkeyDB, name string, env map[string]string) *Worker {
	t.Helper()
	dc := livetest.Docker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := jobimage.Ensure(ctx, dc, jobimage.TestTag); err != nil {
		t.Fatalf("test job image: %v", err)
	}
	vars := map[string]string{
		"VALKEY_URL": db.URL, "PI_UNSIGNED_QUEUES": "*", "PI_WORKER_NAME": name, "PI_JOB_IMAGE": jobimage.TestTag,
		"PI_LOGS_DIR": t.TempDir(), "PI_JOB_MEMORY": "256m", "PI_JOB_CPUS": "0.5",
		"PI_FOLDER_ROOTS": os.TempDir(), "PI_CONTAINER_USER": "root",
	}
	for k, v := range env {
		vars[k] = v
	}
	cfg, err := config.Load(func(k string) string { return vars[k] })
	if err != nil {
		t.Fatalf("worker config: %v", err)
	}
	s, err := stack.Build(context.Background(), cfg, slog.New(slog.NewJSONHandler(io.Discard, nil)), dispatch.Tuning{JobsDir: t.TempDir()})
	if err != nil {
		t.Fatalf("stack.Build: %v", err)
	}
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Worker.Run(runCtx) }()
	t.Cleanup(func() {
		stop()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("worker %s: %v", name, err)
			}
		case <-time.After(60 * time.Second):
			t.Errorf("worker %s did not stop", name)
		}
		s.Close()
	})
	return &Worker{Stack: s, Name: name, LogsDir: vars["PI_LOGS_DIR"]}
}
