package fleettest

import (
	"syscall"
	"testing"
	"time"

	"github.com/pidispatch/pidispatch/jobs"
	"github.com/pidispatch/pidispatch/queue"
)

// Item: stalled checks for hung hosts' own queues. A worker hangs without
// dying (SIGSTOP) while a job of its own host queue runs, and stays stopped
// until its registry row has expired. Only it checks that queue while it
// lives; once its row is gone the other host runs the stalled check there,
// fails the job and records it stalled, exactly once. Thawed, the hung
// worker finds the attempt claimed and writes no second record. Without the
// dead-host check the job would stay active for as long as its host hangs.
func TestFleetHungHostQueueStalled(t *testing.T) {
	t.Parallel()
	s := newScenario(t, "hunghost")
	h := s.worker("h1", nil)
	hung := h.start()
	hung.waitEvent("worker_started", 60*time.Second, nil)
	c := s.worker("c1", nil)
	checker := c.start()
	checker.waitEvent("worker_started", 60*time.Second, nil)
	s.waitLive(h, c)

	id := s.jobID("hung", 0)
	s.addTo(h.hostQueue(), id, forgeJob("acme/hunghost", "", "JOB_SLEEP=3s\nJOB_EXIT_CODE=3\nJOB_PRINT_EXIT_LINE=1"))
	hung.waitEvent("job_container_started", 60*time.Second, containerOf(id))
	hung.signal(syscall.SIGSTOP)
	stoppedAt := time.Now()

	// The row lives 90 s past the last beat; the other host tends dead
	// hosts' queues every minute.
	e := checker.waitEvent("job_stalled", 240*time.Second, jobIs(id))
	t.Logf("the other host failed the hung host's job %s after SIGSTOP", time.Since(stoppedAt).Round(time.Second))
	if q := e.str("queue"); q != h.hostQueue() {
		t.Fatalf("job_stalled on %q, want the hung host's queue %q", q, h.hostQueue())
	}
	if rec := s.onlyRecord(id); rec.Reason != jobs.ReasonStalled || rec.dir != c.logsDir || rec.Host != h.name {
		t.Fatalf("the checker's record: %+v in %s, want failed/stalled of %s in %s", rec.Record, rec.dir, h.name, c.logsDir)
	}
	s.wantState(id, queue.StateFailed)

	hung.signal(syscall.SIGCONT)
	hung.waitEvent("run_record_claimed_elsewhere", 60*time.Second, jobIs(id))
	s.settle(60 * time.Second)
	if rec := s.onlyRecord(id); rec.Reason != jobs.ReasonStalled || rec.dir != c.logsDir {
		t.Fatalf("after the thaw: %+v in %s, want the checker's one stalled record", rec.Record, rec.dir)
	}
	s.report("hung-host-queue", s.figuresOf([]string{id}), "host SIGSTOPped past its registry row with a job active on its own queue")
	hung.stop(40 * time.Second)
	checker.stop(40 * time.Second)
}
