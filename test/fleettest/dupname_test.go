package fleettest

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/pidispatch/pidispatch/enqueue"
	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/jobs"
)

// A second process started under a name a live worker holds is refused at
// boot (exit code 2) with the holder named: its machine and pid. The holder
// is untouched: its row still names it, and it still runs its queue's jobs.
func TestFleetDuplicateNameRefused(t *testing.T) {
	t.Parallel()
	s := newScenario(t, "dup")
	d1 := s.worker("d1", nil)
	d2 := s.worker("d2", nil)
	holder := d1.start()
	holder.waitEvent("worker_started", 60*time.Second, nil)
	d2.start().waitEvent("worker_started", 60*time.Second, nil)
	s.waitLive(d1, d2)

	dup := d1.start() // same name, same environment, another process
	if code := dup.exitCode(30 * time.Second); code != 2 {
		t.Fatalf("duplicate exit code %d, want 2:\n%s", code, dup.tail(40))
	}
	out := dup.raw()
	machine := fleet.DefaultName()
	for _, want := range []string{
		"in use",
		fmt.Sprintf("pid %d", holder.cmd.Process.Pid),
		fmt.Sprintf("machine %q", machine),
	} {
		if !strings.Contains(out, want) {
			t.Fatalf("the refusal does not say %q:\n%s", want, dup.tail(40))
		}
	}
	for _, msg := range []string{"worker_started", "reaped_containers", "scope_claims_swept", "job_started"} {
		if got := dup.find(msg, nil); len(got) != 0 {
			t.Fatalf("the refused duplicate logged %s:\n%s", msg, dup.tail(40))
		}
	}

	// The holder keeps its row and its queue.
	if h, ok := s.hosts()[d1.name]; !ok || h.Pid != holder.cmd.Process.Pid {
		t.Fatalf("hosts: %s = %+v (present %v), want the holder's pid %d", d1.name, h, ok, holder.cmd.Process.Pid)
	}
	p, err := enqueue.NewProducer(s.client, enqueue.ProducerConfig{UnsignedQueues: []string{fleet.EveryQueue}, WorkerName: d1.name, WorkerNameDeclared: true})
	if err != nil {
		t.Fatal(err)
	}
	local := jobs.Job{Folder: t.TempDir(), Flow: "fix", Task: "JOB_SLEEP=300ms"}
	e, err := p.EnqueueLocal(t.Context(), local)
	if err != nil || e.Queue != d1.hostQueue() {
		t.Fatalf("enqueue on %s: %+v %v", d1.hostQueue(), e, err)
	}
	suite.ledger.enqueued(s.key(), e.JobID)
	if rec := s.waitRecord(e.JobID, 60*time.Second); rec.Host != d1.name || rec.Outcome != jobs.OutcomeCompleted {
		t.Fatalf("the holder's job: %+v", rec.Record)
	}
	s.settle(30 * time.Second)
	holder.stop(40 * time.Second)
}
