package dash_test

import (
	"context"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/pidispatch/pidispatch/enqueue"
	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/internal/testkit/browsertest"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest/liveworker"
	"github.com/pidispatch/pidispatch/jobs"
	"github.com/pidispatch/pidispatch/operator/dash"
)

// A real worker runs one job with the test job image; the page in Chromium
// shows the worker's own registry row and the run its worker recorded.
func TestDashboardShowsARealWorkersRun(t *testing.T) {
	db := livetest.Valkey(t)
	name := "dash-worker-1"
	liveworker.Boot(t, db, name, map[string]string{"PI_CONTAINER_USER": "owner"})
	p, err := enqueue.NewProducer(db.Client, enqueue.ProducerConfig{UnsignedQueues: []string{fleet.EveryQueue}, WorkerName: name, WorkerNameDeclared: true})
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
	liveworker.Boot(t, db, name, map[string]string{"PI_CONTAINER_USER": "owner"})
	p, err := enqueue.NewProducer(db.Client, enqueue.ProducerConfig{UnsignedQueues: []string{fleet.EveryQueue}, WorkerName: name, WorkerNameDeclared: true})
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
