package fleettest

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/pidispatch/pidispatch/enqueue"
	"github.com/pidispatch/pidispatch/jobs"
	"github.com/pidispatch/pidispatch/queue"
)

// redis-server restarted under load: while three workers drain ~30 short
// jobs, the server is stopped for 3 s and started again on the same port
// with its data (append-only file, fsync always, as a real deployment keeps
// it). The workers survive and reconnect, later jobs run, and every job ends
// in exactly one recorded terminal state, started at most once.
//
// The scenario has a redis-server of its own: the suite's is shared by the
// scenarios running in parallel.
func TestFleetRedisRestartUnderLoad(t *testing.T) {
	t.Parallel()
	requireFleet(t)
	srv, err := startRedis(filepath.Join(t.TempDir(), "redis"), true)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.stop() })
	s := newScenarioOn(t, "outage", srv)
	ws := []*worker{s.worker("r1", nil), s.worker("r2", nil), s.worker("r3", nil)}
	for _, w := range ws {
		w.start().waitEvent("worker_started", 60*time.Second, nil)
	}
	s.waitLive(ws...)

	router := enqueue.NewRouter(s.producer(), enqueue.RouterConfig{})
	var ids []string
	for i := range 30 {
		id := s.jobID("load", i)
		s.enqueueForge(router, id, forgeJob("acme/outage", "", "JOB_SLEEP=300ms"))
		ids = append(ids, id)
	}
	// Let the fleet get going, then pull the server out from under it.
	s.eventually(90*time.Second, func(context.Context) error {
		n := 0
		for _, id := range ids {
			if len(s.records(id)) > 0 {
				n++
			}
		}
		if n < 6 {
			return fmt.Errorf("%d of %d jobs recorded, waiting for 6", n, len(ids))
		}
		return nil
	})
	if err := srv.stop(); err != nil {
		t.Fatal(err)
	}
	down := time.Now()
	time.Sleep(3 * time.Second)
	if err := srv.start(); err != nil {
		t.Fatalf("restart redis-server: %v", err)
	}
	t.Logf("redis-server was down %s", time.Since(down).Round(100*time.Millisecond))

	for _, w := range ws {
		if w.last().exited() {
			t.Fatalf("%s died with the server: %v\n%s", w.name, w.last().err, w.last().tail(40))
		}
	}
	// Every job of the burst finishes: completed, or failed as stalled when
	// the outage took its lock (a stalled paid job is never re-run).
	// A job whose container exited 0 completed: its one record and its
	// state in the queue must say so, whatever the server did meanwhile.
	s.settle(3 * time.Minute)
	outcomes := map[string]int{}
	for _, id := range ids {
		recs := s.records(id)
		if len(recs) != 1 {
			t.Errorf("job %s has %d records, want exactly one: %+v", id, len(recs), recs)
			continue
		}
		r := recs[0]
		outcomes[r.Outcome+"/"+string(r.Reason)]++
		if r.Outcome != jobs.OutcomeCompleted {
			t.Logf("job %s ended %s/%s; its trail:\n%s", id, r.Outcome, r.Reason, s.trail(id))
		}
		ranToEnd := false
		for _, p := range s.procs() {
			ranToEnd = ranToEnd || len(p.find("job_container_exited", func(e event) bool {
				return e.str("job") == id && e.str("exit_code") == "0"
			})) > 0
		}
		switch {
		case ranToEnd && r.Outcome != jobs.OutcomeCompleted:
			t.Errorf("job %s ran to exit 0, but its record says %s/%s (host %s, in %s)", id, r.Outcome, r.Reason, r.Host, r.dir)
		case r.Outcome != jobs.OutcomeCompleted && r.Reason != jobs.ReasonStalled:
			t.Errorf("job %s: record %s/%s", id, r.Outcome, r.Reason)
		}
		if got, where, err := s.stateOf(id); ranToEnd && (err != nil || got != queue.StateCompleted) {
			t.Errorf("job %s ran to exit 0, but it is %q on %q (%v)", id, got, where, err)
		}
	}
	t.Logf("outcomes of the burst: %v; reports that needed retries: %d", outcomes, count(s.procs(), "job_report_delivered", ""))
	if n := count(s.procs(), "job_report_failed", ""); n != 0 {
		t.Errorf("%d outcomes were never reported to the queue", n)
	}

	// Later jobs run, on reconnected workers.
	var later []string
	for i := range 6 {
		id := s.jobID("later", i)
		s.enqueueForge(router, id, forgeJob("acme/outage", "", "JOB_SLEEP=300ms"))
		later = append(later, id)
	}
	for _, id := range later {
		if rec := s.waitRecord(id, 90*time.Second); rec.Outcome != jobs.OutcomeCompleted {
			t.Fatalf("job %s after the restart: %+v", id, rec.Record)
		}
	}
	s.settle(60 * time.Second)
	for _, w := range ws {
		w.last().stop(40 * time.Second)
	}
}
