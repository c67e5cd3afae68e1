package dash_test

import (
	"context"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/pidispatch/pidispatch/config"
	"github.com/pidispatch/pidispatch/dash"
	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/enqueue"
	"github.com/pidispatch/pidispatch/internal/browsertest"
	"github.com/pidispatch/pidispatch/internal/jobimage"
	"github.com/pidispatch/pidispatch/internal/livetest"
	"github.com/pidispatch/pidispatch/jobs"
	"github.com/pidispatch/pidispatch/stack"
)

// bootWorker runs a real worker (the stack cmd/worker builds) named name on
// db with the test job image, until the test ends.
func bootWorker(t *testing.T, db *livetest.ValkeyDB, name string) {
	t.Helper()
	dc := livetest.Docker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	require.NoError(t, jobimage.Ensure(ctx, dc, jobimage.TestTag))
	env := map[string]string{
		"VALKEY_URL": db.URL, "PI_WORKER_NAME": name, "PI_JOB_IMAGE": jobimage.TestTag,
		"PI_LOGS_DIR": t.TempDir(), "PI_JOB_MEMORY": "256m", "PI_JOB_CPUS": "0.5",
		// Folder jobs work in the tests' temporary folders, owned by whoever
		// runs the tests (root in a container).
		"PI_FOLDER_ROOTS": os.TempDir(), "PI_CONTAINER_USER": "owner",
	}
	cfg, err := config.Load(func(k string) string { return env[k] })
	require.NoError(t, err)
	s, err := stack.Build(context.Background(), cfg, slog.New(slog.NewJSONHandler(io.Discard, nil)), dispatch.Tuning{JobsDir: t.TempDir()})
	require.NoError(t, err)
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Worker.Run(runCtx) }()
	t.Cleanup(func() {
		stop()
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(60 * time.Second):
			t.Error("the worker did not stop")
		}
		s.Close()
	})
}

// A real worker runs one job with the test job image; the page in Chromium
// shows the worker's own registry row and the run its worker recorded.
func TestDashboardShowsARealWorkersRun(t *testing.T) {
	db := livetest.Valkey(t)
	name := "dash-worker-1"
	bootWorker(t, db, name)
	p, err := enqueue.NewProducer(db.Client, enqueue.ProducerConfig{WorkerName: name, WorkerNameDeclared: true})
	require.NoError(t, err)
	e, err := p.EnqueueLocal(context.Background(), jobs.Job{Folder: t.TempDir(), Flow: "fix", Task: "JOB_PRINT_EXIT_LINE=1"})
	require.NoError(t, err)

	src, err := dash.NewValkey(db.Client, dash.ValkeyConfig{})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		runs, _, err := src.Runs(context.Background(), 10)
		return err == nil && len(runs) == 1 && runs[0].JobID == e.JobID
	}, 90*time.Second, 200*time.Millisecond, "no run record of %s in the mirror", e.JobID)

	url := serveLive(t, db, dash.Options{}, false)
	b := browsertest.Chromium(t, liveTimeout)
	require.NoError(t, chromedp.Do(b.Ctx,
		chromedp.Navigate(url),
		browsertest.WaitText(30*time.Second, name, e.JobID, "completed", "1 of 10"),
	))
	browsertest.Screenshot(t, b, "real-worker")
}

// The Cancel button of a running job, in Chromium, asks for a confirmation
// and stops the job through the worker that runs it, which records it as an
// operator cancel.
func TestCancelButtonStopsARealWorkersJob(t *testing.T) {
	db := livetest.Valkey(t)
	name := "dash-worker-2"
	bootWorker(t, db, name)
	p, err := enqueue.NewProducer(db.Client, enqueue.ProducerConfig{WorkerName: name, WorkerNameDeclared: true})
	require.NoError(t, err)
	e, err := p.EnqueueLocal(context.Background(), jobs.Job{Folder: t.TempDir(), Flow: "fix", Task: "JOB_SLEEP=120s"})
	require.NoError(t, err)

	url := serveLive(t, db, dash.Options{}, true)
	b := browsertest.Chromium(t, liveTimeout)
	b.AcceptDialogs()
	require.NoError(t, chromedp.Do(b.Ctx,
		chromedp.Navigate(url),
		browsertest.WaitText(60*time.Second, "running for"),
		chromedp.Click(chromedp.CSS("button.cancel")),
		browsertest.WaitText(30*time.Second, "stopped by "+name, string(jobs.ReasonOperatorCancel)),
	))
	require.Len(t, b.Dialogs(), 1)
	require.Contains(t, b.Dialogs()[0], e.JobID)
	browsertest.Screenshot(t, b, "cancelled")
}
