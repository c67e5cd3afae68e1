package fleettest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pidispatch/pidispatch/enqueue"
	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/jobs"
	"github.com/pidispatch/pidispatch/queue"
)

// A host killed with SIGKILL in the middle of a job, in a fleet of three:
// the job ends failed as stalled with exactly one record and never runs
// twice; the restarted host reaps the orphaned container, sweeps its leftover
// scope claim and fails its own orphaned job at boot, while the other hosts
// keep working throughout.
func TestFleetKilledHostMidJob(t *testing.T) {
	t.Parallel()
	s := newScenario(t, "kill")
	scope := fmt.Sprintf("acme/kill-%d", s.db)
	limits := filepath.Join(s.dir, "scoped-limits.json")
	// Concurrency 1 for the scope: the running job holds the fleet lease
	// slot:s:<hash>:0, the claim a crash leaves behind.
	if err := os.WriteFile(limits, []byte(`{"version":1,"limits":[{"scope":"`+scope+`","concurrent":1}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	resolver := s.script("resolve-vault", "echo TOKEN=fleet-kill-secret\n")
	common := map[string]string{"PI_SCOPED_LIMITS_FILE": limits}
	k1 := s.worker("k1", map[string]string{"PI_SCOPED_LIMITS_FILE": limits, "PI_SECRET_PROFILES": "vault:" + resolver})
	k2 := s.worker("k2", common)
	k3 := s.worker("k3", common)
	for _, w := range []*worker{k1, k2, k3} {
		w.start().waitEvent("worker_started", 60*time.Second, nil)
	}
	s.waitLive(k1, k2, k3)

	// The long job needs the profile only k1 has, so the router puts it on
	// k1's queue: the victim is known before it is picked up.
	router := enqueue.NewRouter(s.producer(), enqueue.RouterConfig{})
	jobID := s.jobID("long", 0)
	if e := s.enqueueForge(router, jobID, forgeJob(scope, "vault", "JOB_SLEEP=120s")); e.Queue != k1.hostQueue() {
		t.Fatalf("long job went to %s, want %s", e.Queue, k1.hostQueue())
	}
	claimKey := fleet.ScopeSlotKey(fleet.ScopeHash(scope), 0)
	holder := k1.name + "#" + jobID
	victim := k1.last()
	victim.waitEvent("job_started", 60*time.Second, jobIs(jobID))
	s.eventually(30*time.Second, func(ctx context.Context) error {
		got, err := s.client.Get(ctx, claimKey).Result()
		if err != nil || got != holder {
			return fmt.Errorf("scope claim %s = %q (%v), want %q", claimKey, got, err, holder)
		}
		ids, err := containersOf(k1.name)
		if err != nil || len(ids) != 1 {
			return fmt.Errorf("containers of %s: %v (%v), want the running job's", k1.name, ids, err)
		}
		return nil
	})

	victim.signal(syscall.SIGKILL)
	if code := victim.exitCode(10 * time.Second); code != -1 {
		t.Fatalf("killed worker exit code %d, want -1 (a signal)", code)
	}
	// What a crash leaves: the container, the claim, the job active.
	if ids, _ := containersOf(k1.name); len(ids) != 1 {
		t.Fatalf("the job's container should outlive its killed worker: %v", ids)
	}
	hostQ := s.queue(k1.hostQueue())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	j, err := hostQ.Get(ctx, jobID)
	cancel()
	if err != nil || j.State != queue.StateActive {
		t.Fatalf("after the kill the job should still be active: %+v %v", j, err)
	}

	// The others keep serving the shared queue while k1 is down.
	for i := range 3 {
		s.enqueueForge(router, s.jobID("during", i), forgeJob("acme/other", "", "JOB_SLEEP=300ms"))
	}

	killedAt := time.Now()
	restarted := k1.start()
	restarted.waitEvent("worker_started", 60*time.Second, nil)
	for _, msg := range []string{"reaped_containers", "scope_claims_swept", "job_orphan_failed"} {
		if got := restarted.find(msg, nil); len(got) != 1 {
			t.Fatalf("the restarted worker logged %s %d times, want once:\n%s", msg, len(got), restarted.tail(40))
		}
	}
	t.Logf("%s restarted and failed its orphaned job %s after SIGKILL", k1.name, time.Since(killedAt).Round(time.Millisecond))
	if e := restarted.find("job_orphan_failed", nil)[0]; e.str("jobId") != jobID {
		t.Fatalf("job_orphan_failed names %q, want %s", e.str("jobId"), jobID)
	}
	if e := restarted.find("scope_claims_swept", nil)[0]; e.str("count") != "1" {
		t.Fatalf("scope_claims_swept count %s, want 1", e.str("count"))
	}

	rec := s.waitRecord(jobID, 30*time.Second)
	if rec.Outcome != jobs.OutcomeFailed || rec.Reason != jobs.ReasonStalled || rec.Host != k1.name || rec.dir != k1.logsDir || rec.Target != scope {
		t.Fatalf("record of the killed job: %+v in %s, want failed/stalled on %s", rec.Record, rec.dir, k1.name)
	}
	ctx, cancel = context.WithTimeout(context.Background(), 5*time.Second)
	j, err = hostQ.Get(ctx, jobID)
	cancel()
	if err != nil || j.State != queue.StateFailed || j.FailedReason != string(jobs.ReasonStalled) {
		t.Fatalf("killed job on %s: %+v %v, want failed with reason stalled", k1.hostQueue(), j, err)
	}
	ctx, cancel = context.WithTimeout(context.Background(), 5*time.Second)
	got, err := s.client.Get(ctx, claimKey).Result()
	cancel()
	if !errors.Is(err, redis.Nil) {
		t.Fatalf("the dead run's scope claim %s survived the restart: %q (%v)", claimKey, got, err)
	}
	if ids, _ := containersOf(k1.name); len(ids) != 0 {
		t.Fatalf("the orphaned container was not reaped: %v", ids)
	}

	// Nothing ran twice: the long job started once, in the killed process.
	if n := count(s.procs(), "job_started", jobID); n != 1 {
		t.Fatalf("job_started %d times for %s across the fleet, want 1", n, jobID)
	}
	// The scope is free again: a new job of it runs (on the restarted k1,
	// which alone has the profile).
	next := s.jobID("after", 0)
	s.enqueueForge(router, next, forgeJob(scope, "vault", "JOB_SLEEP=300ms"))
	if rec := s.waitRecord(next, 60*time.Second); rec.Host != k1.name || rec.Outcome != jobs.OutcomeCompleted {
		t.Fatalf("job after the restart: %+v", rec.Record)
	}
	s.settle(60 * time.Second)
	restarted.stop(40 * time.Second)
}
