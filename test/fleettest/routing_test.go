package fleettest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/pidispatch/pidispatch/enqueue"
	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/jobs"
	"github.com/pidispatch/pidispatch/queue"
)

// Capability routing across three worker processes: jobs that need the
// secret profile "prod" are routed at enqueue to the one host that declared
// it and run there only (with the resolver's secret in their environment);
// profile-free forge jobs stay on the shared queue and every host drains it.
func TestFleetCapabilityRouting(t *testing.T) {
	t.Parallel()
	s := newScenario(t, "route")
	resolver := s.script("resolve-prod", "echo TOKEN=fleet-route-secret\n")
	check := s.script("check-jira", "exit 0\n")
	w1 := s.worker("w1", map[string]string{"PI_SECRET_PROFILES": "prod:" + resolver})
	// A wait profile is a capability too; no job here needs it (a job that
	// did would be held by the wait-for feature).
	w2 := s.worker("w2", map[string]string{"PI_WAIT_PROFILES": "jira:" + check})
	w3 := s.worker("w3", nil)
	for _, w := range []*worker{w1, w2, w3} {
		w.start().waitEvent("worker_started", 60*time.Second, nil)
	}
	s.waitLive(w1, w2, w3)

	// The operator's view of the fleet: each host with what it declared.
	hosts := s.hosts()
	for name, caps := range map[string]string{w1.name: "s:prod", w2.name: "w:jira", w3.name: ""} {
		if h, ok := hosts[name]; !ok || !h.Routes || h.Caps != caps {
			t.Fatalf("hosts --json: %s = %+v (present %v), want routes with caps %q", name, h, ok, caps)
		}
	}

	router := enqueue.NewRouter(s.producer(), enqueue.RouterConfig{})
	var profiled []string
	for i := range 4 {
		id := s.jobID("prod", i)
		e := s.enqueueForge(router, id, forgeJob("acme/route", "prod", "JOB_SLEEP=300ms\nJOB_REQUIRE_ENV=TOKEN"))
		if e.Queue != w1.hostQueue() {
			t.Fatalf("profile job %s went to %s, want %s (the only host with prod)", id, e.Queue, w1.hostQueue())
		}
		profiled = append(profiled, id)
	}
	for _, id := range profiled {
		rec := s.waitRecord(id, 90*time.Second)
		if rec.Host != w1.name || rec.dir != w1.logsDir || rec.Outcome != jobs.OutcomeCompleted {
			t.Fatalf("profile job %s: record %+v in %s, want completed on %s", id, rec.Record, rec.dir, w1.name)
		}
		// JOB_REQUIRE_ENV exits 3 (failed) without TOKEN: completed means
		// the resolver's secret reached the job.
		// The job stayed on w1's queue (nothing moved it) and finished there.
		// The record is written before the outcome is reported: the state
		// follows shortly.
		hostQ := s.queue(w1.hostQueue())
		s.eventually(10*time.Second, func(ctx context.Context) error {
			j, err := hostQ.Get(ctx, id)
			if err != nil || j.State != queue.StateCompleted || j.ProcessedBy != w1.name {
				return fmt.Errorf("profile job %s on %s: %+v %v", id, w1.hostQueue(), j, err)
			}
			return nil
		})
		for _, w := range []*worker{w2, w3} {
			if n := count(w.allProcs(), "job_started", id); n != 0 {
				t.Fatalf("%s started profile job %s, which needs a profile it lacks", w.name, id)
			}
		}
	}

	// Profile-free jobs: the shared queue, drained by all three. A second of
	// work each keeps every host's two slots busy long enough that no host
	// can drain the burst before the others' fetches wake.
	ran := map[string]int{}
	var shared []string
	for i := range 12 {
		id := s.jobID("any", i)
		e := s.enqueueForge(router, id, forgeJob("acme/spread", "", "JOB_SLEEP=1s"))
		if e.Queue != fleet.SharedQueue {
			t.Fatalf("profile-free job %s went to %s, want the shared queue", id, e.Queue)
		}
		shared = append(shared, id)
	}
	for _, id := range shared {
		rec := s.waitRecord(id, 120*time.Second)
		if rec.Outcome != jobs.OutcomeCompleted {
			t.Fatalf("job %s: %+v", id, rec.Record)
		}
		ran[rec.Host]++
	}
	for _, w := range []*worker{w1, w2, w3} {
		if ran[w.name] == 0 {
			t.Errorf("%s ran none of the %d shared jobs (spread %v)", w.name, len(shared), ran)
		}
	}
	t.Logf("shared jobs per host: %v", ran)

	// Every run is mirrored fleet-wide by the named host that ran it (the
	// mirror writes in the background, shortly after the record).
	for _, id := range append(profiled, shared...) {
		s.eventually(10*time.Second, func(ctx context.Context) error {
			key, err := runRecordKey(ctx, s.client, id)
			if err == nil && key == "" {
				err = fmt.Errorf("no run mirror of %s", id)
			}
			return err
		})
	}
	s.settle(60 * time.Second)
}
