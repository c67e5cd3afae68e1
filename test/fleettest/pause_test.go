package fleettest

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pidispatch/pidispatch/enqueue"
	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/jobs"
	"github.com/pidispatch/pidispatch/queue"
)

// The kill switch with a host down: `pi-dispatch pause` reaches the queue of
// a host that left (its row is gone, its queue is not), a host queue created
// during the pause starts paused, a host that returns during the pause stays
// paused, and `pi-dispatch resume` resumes every queue: the jobs that queued
// up meanwhile then run, one on each host.
func TestFleetPauseWithHostDown(t *testing.T) {
	t.Parallel()
	s := newScenario(t, "pause")
	p1, p2, p3 := s.worker("p1", nil), s.worker("p2", nil), s.worker("p3", nil)
	for _, w := range []*worker{p1, p2, p3} {
		w.start().waitEvent("worker_started", 60*time.Second, nil)
	}
	s.waitLive(p1, p2, p3)

	// p3 leaves cleanly: row gone, queue still there.
	p3.last().stop(40 * time.Second)
	hosts := s.hosts()
	if _, ok := hosts[p3.name]; ok || len(hosts) != 2 {
		t.Fatalf("after %s left, hosts: %+v", p3.name, hosts)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	found, err := queue.Discover(ctx, s.client, "")
	cancel()
	if err != nil || !slices.Contains(found, p3.hostQueue()) {
		t.Fatalf("the departed host's queue should still exist: %v %v", found, err)
	}

	out := s.mustCLI("pause")
	if !strings.HasPrefix(out, "paused") || !strings.Contains(out, "[4 queues]") {
		t.Fatalf("pause: %q, want the shared queue and three host queues paused", out)
	}
	if st := s.status(); !st.PausedState || st.PausedPartial || !st.PauseFlag || st.Queues != 4 {
		t.Fatalf("status after pause: %+v", st)
	}
	s.wantPaused(true, fleet.SharedQueue, p1.hostQueue(), p2.hostQueue(), p3.hostQueue())

	// A host that joins during the pause, and the one that returns.
	p4 := s.worker("p4", nil)
	for _, w := range []*worker{p4, p3} {
		p := w.start()
		p.waitEvent("host_queue_starts_paused", 60*time.Second, nil)
		p.waitEvent("worker_started", 60*time.Second, nil)
	}
	s.waitLive(p1, p2, p3, p4)
	if st := s.status(); !st.PausedState || st.PausedPartial || st.Queues != 5 {
		t.Fatalf("status with %s joined and %s back: %+v", p4.name, p3.name, st)
	}
	s.wantPaused(true, p3.hostQueue(), p4.hostQueue())

	// Work queued during the pause: one folder run per host (pi-dispatch run
	// on that host's queue) and one forge job on the shared queue. None runs.
	all := []*worker{p1, p2, p3, p4}
	byHost := map[string]string{}
	for _, w := range all {
		id := s.runOn(w, "JOB_SLEEP=300ms")
		byHost[id] = w.name
	}
	sharedID := s.jobID("shared", 0)
	s.enqueueForge(enqueue.NewRouter(s.producer(), enqueue.RouterConfig{}), sharedID, forgeJob("acme/pause", "", "JOB_SLEEP=300ms"))
	time.Sleep(3 * time.Second)
	// BullMQ 6's layout (the default): a paused queue's jobs stay waiting.
	for id := range byHost {
		s.wantState(id, queue.StateWaiting)
	}
	s.wantState(sharedID, queue.StateWaiting)
	if n := count(s.procs(), "job_started", ""); n != 0 {
		t.Fatalf("%d jobs started during the pause", n)
	}

	out = s.mustCLI("resume")
	if !strings.HasPrefix(out, "resumed") || !strings.Contains(out, "[5 queues]") {
		t.Fatalf("resume: %q", out)
	}
	if st := s.status(); st.PausedState || st.PausedPartial || st.PauseFlag || st.Queues != 5 {
		t.Fatalf("status after resume: %+v", st)
	}
	s.wantPaused(false, fleet.SharedQueue, p1.hostQueue(), p2.hostQueue(), p3.hostQueue(), p4.hostQueue())
	for id, host := range byHost {
		if rec := s.waitRecord(id, 60*time.Second); rec.Host != host || rec.Outcome != jobs.OutcomeCompleted {
			t.Fatalf("job %s queued for %s: %+v", id, host, rec.Record)
		}
	}
	if rec := s.waitRecord(sharedID, 60*time.Second); rec.Outcome != jobs.OutcomeCompleted {
		t.Fatalf("shared job: %+v", rec.Record)
	}
	s.settle(30 * time.Second)
}

// runOn queues a folder run on w's queue with `pi-dispatch run`, as an
// operator on that host would, and returns its job id. The folder is a
// scratch one, not a git repository: --force.
func (s *scenario) runOn(w *worker, task string) string {
	s.t.Helper()
	folder := s.t.TempDir()
	out, errOut, code := s.cli(map[string]string{"VALKEY_URL": s.url, "PI_UNSIGNED_QUEUES": "*", "PI_WORKER_NAME": w.name},
		"run", folder, "--force", "--flow", "fix", "--task", task, "--env-file", "") // a scratch folder, not a git work tree
	id, ok := strings.CutPrefix(strings.TrimSpace(out), "queued ")
	if code != 0 || !ok || strings.ContainsAny(id, " \n") || !strings.Contains(errOut, "queue "+w.hostQueue()) {
		s.t.Fatalf("pi-dispatch run on %s: exit %d\nstdout: %s\nstderr: %s", w.name, code, out, errOut)
	}
	suite.ledger.enqueued(s.key(), id)
	return id
}

// wantPaused checks each queue's pause state in Valkey.
func (s *scenario) wantPaused(want bool, names ...string) {
	s.t.Helper()
	for _, name := range names {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		got, err := s.queue(name).IsPaused(ctx)
		cancel()
		if err != nil || got != want {
			s.t.Fatalf("queue %s paused=%v (%v), want %v", name, got, err, want)
		}
	}
}

// wantState checks a job's state, wherever it is.
func (s *scenario) wantState(id string, want queue.State) {
	s.t.Helper()
	if got, where, err := s.stateOf(id); err != nil || got != want {
		s.t.Fatalf("job %s: state %q on %q (%v), want %s", id, got, where, err, want)
	}
}

// stateOf finds a job on whatever queue holds it.
func (s *scenario) stateOf(id string) (state queue.State, where string, err error) {
	dir, err := queue.NewDirectory(s.client, queue.Config{})
	if err != nil {
		return "", "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	where, j, err := dir.Find(ctx, id)
	if err != nil {
		return "", where, err
	}
	return j.State, where, nil
}
