package main

import (
	"context"
	"testing"
	"time"

	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/enqueue"
	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/jobs"
	"github.com/pidispatch/pidispatch/operator"
	"github.com/pidispatch/pidispatch/queue"
	"github.com/pidispatch/pidispatch/runner"
)

// An operator's cancel of a running job stops its container through the
// worker that holds it; the job is recorded operator-cancel and not retried.
func TestOperatorCancelStopsRunningJob(t *testing.T) {
	t.Parallel()
	ensureImage(t)
	dc := livetest.Docker(t)
	db := livetest.Valkey(t)
	name := uniqueName("cancel", db)
	w := bootWorker(t, testEnv(t, db.URL, map[string]string{"PI_WORKER_NAME": name}), dispatch.Tuning{})
	p, err := enqueue.NewProducer(db.Client, enqueue.ProducerConfig{UnsignedQueues: []string{fleet.EveryQueue}, WorkerName: name, WorkerNameDeclared: true, Attempts: 3})
	if err != nil {
		t.Fatal(err)
	}
	e, err := p.EnqueueLocal(context.Background(), jobs.Job{Folder: t.TempDir(), Flow: "fix", Task: "JOB_SLEEP=60s"})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for len(containers(t, dc, runner.LabelJob, e.JobID)) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the job's container never started")
		}
		time.Sleep(100 * time.Millisecond)
	}

	res, err := operator.Cancel(context.Background(), db.Client, e.JobID, 10*time.Second)
	if err != nil || res.Where != "running-stopped" || res.Host != name {
		t.Fatalf("cancel: %+v %v", res, err)
	}
	rec := waitRecord(t, w.cfg.LogsDir, e.JobID, 30*time.Second)
	if rec.Outcome != jobs.OutcomePolicy || rec.Reason != jobs.ReasonOperatorCancel {
		t.Fatalf("record %+v", rec)
	}
	j := waitJobState(t, testQueue(t, db, e.Queue), e.JobID, queue.StateCompleted, 10*time.Second)
	if j.AttemptsMade != 1 {
		t.Fatalf("a cancelled job must not be retried: attempts made %d", j.AttemptsMade)
	}
	if left := containersGone(t, dc, runner.LabelJob, e.JobID, 10*time.Second); len(left) != 0 {
		t.Fatalf("%d containers left after cancel", len(left))
	}
	if n := countEvents(t, w.logs.String(), "job_started", e.JobID); n != 1 {
		t.Fatalf("%d starts, want 1", n)
	}
}
