package fleettest

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/pidispatch/pidispatch/enqueue"
	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/internal/faultpoint"
	"github.com/pidispatch/pidispatch/jobs"
	"github.com/pidispatch/pidispatch/queue"
	"github.com/pidispatch/pidispatch/runner"
)

// envCrashAt arms a fault-injection worker (suite.faultBin): its process
// kills itself with SIGKILL the first time it reaches the named step (one of
// the internal/faultpoint constants). The shipping binary ignores it.
const envCrashAt = "PIDISPATCH_TEST_CRASH_AT"

// faultWorker is a worker whose processes run the fault-injection build.
func (s *scenario) faultWorker(role string, extra map[string]string) *worker {
	s.t.Helper()
	w := s.worker(role, extra)
	w.bin = suite.faultBin
	return w
}

// crashAt arms the worker's next processes to crash at point; "" disarms.
func (w *worker) crashAt(point string) {
	if point == "" {
		delete(w.env, envCrashAt)
		return
	}
	w.env[envCrashAt] = point
}

// crashed waits for a process to end by a signal (its own SIGKILL, or the
// test's) and fails otherwise.
func (p *proc) crashed(timeout time.Duration) {
	p.w.s.t.Helper()
	if code := p.exitCode(timeout); code != -1 {
		p.w.s.t.Fatalf("%s exited %d, want death by a signal:\n%s", p, code, p.tail(40))
	}
}

// attempts is every record of job id across the scenario's logs dirs, by
// attempt: more than one record for an attempt is a duplicate.
func (s *scenario) attempts(id string) map[int][]placedRecord {
	s.t.Helper()
	s.mu.Lock()
	ws := slices.Clone(s.workers)
	s.mu.Unlock()
	out := map[int][]placedRecord{}
	for _, w := range ws {
		recs, err := jobs.ReadRecords(w.logsDir, id)
		if err != nil {
			s.t.Fatalf("records of %s in %s: %v", id, w.logsDir, err)
		}
		for _, r := range recs {
			out[r.Attempt] = append(out[r.Attempt], placedRecord{r, w.logsDir})
		}
	}
	return out
}

// onlyRecord requires exactly one record of job id, of attempt 1, and
// returns it.
func (s *scenario) onlyRecord(id string) placedRecord {
	s.t.Helper()
	by := s.attempts(id)
	if len(by) != 1 || len(by[1]) != 1 {
		s.t.Fatalf("job %s: records by attempt %+v, want exactly one, of attempt 1\n%s", id, by, s.trail(id))
	}
	return by[1][0]
}

// addJob adds a job straight onto a queue with its own attempts and no
// backoff (a retry runs at once), and enters it in the ledger.
func (s *scenario) addJob(queueName, id string, job jobs.Job, attempts int) {
	s.t.Helper()
	data, err := json.Marshal(job)
	if err != nil {
		s.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, added, err := s.queue(queueName).Add(ctx, enqueue.JobName, data, queue.AddOptions{JobID: id, Attempts: attempts}); err != nil || !added {
		s.t.Fatalf("add %s to %s: added %v, %v", id, queueName, added, err)
	}
	suite.ledger.enqueued(s.key(), id)
}

// figures are a fault scenario's counts, for the suite's closing lines.
type figures struct {
	jobs, attempts, records, duplicates, lost int
	outcomes                                  map[string]int
}

// figuresOf counts, over jobs, the attempts that left a record, the records,
// the duplicates (records beyond the first of an attempt) and the lost
// attempts (a job with no record at all, or a gap below its latest recorded
// attempt).
func (s *scenario) figuresOf(ids []string) figures {
	s.t.Helper()
	f := figures{jobs: len(ids), outcomes: map[string]int{}}
	for _, id := range ids {
		by := s.attempts(id)
		if len(by) == 0 {
			f.lost++
			continue
		}
		last := slices.Max(slices.Collect(maps.Keys(by)))
		for a := 1; a <= last; a++ {
			recs := by[a]
			switch {
			case len(recs) == 0:
				f.lost++
				continue
			case len(recs) > 1:
				f.duplicates += len(recs) - 1
			}
			f.attempts++
			f.records += len(recs)
		}
		r := by[last][0]
		f.outcomes[r.Outcome+"/"+string(r.Reason)]++
	}
	return f
}

// report logs the figures and keeps them for the suite's closing lines; a
// duplicate or a lost attempt fails the scenario.
func (s *scenario) report(name string, f figures, extra string) {
	s.t.Helper()
	keys := slices.Sorted(maps.Keys(f.outcomes))
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %d", k, f.outcomes[k]))
	}
	line := fmt.Sprintf("fault %s: %d jobs, %d attempts, %d records (%.2f per attempt), %d duplicates, %d lost; %s",
		name, f.jobs, f.attempts, f.records, float64(f.records)/float64(max(f.attempts, 1)), f.duplicates, f.lost, strings.Join(parts, ", "))
	if extra != "" {
		line += "; " + extra
	}
	s.t.Log(line)
	suite.faultLines.add(line)
	if f.duplicates != 0 || f.lost != 0 {
		s.t.Errorf("%s: %d duplicate and %d lost records", name, f.duplicates, f.lost)
	}
}

// containerStates maps each container of a worker name to its state.
func containerStates(name string) (map[string]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := suite.docker.ContainerList(ctx, client.ContainerListOptions{All: true,
		Filters: make(client.Filters).Add("label", runner.LabelWorker+"="+name)})
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, c := range res.Items {
		out[c.ID] = string(c.State)
	}
	return out, nil
}

// containerOf matches the event of a job's container (its "job" field).
func containerOf(id string) func(event) bool {
	return func(e event) bool { return e.str("job") == id }
}

// exitText renders a record's exit code.
func exitText(code *int) string {
	if code == nil {
		return "null"
	}
	return fmt.Sprint(*code)
}

// wantContainers says why a worker name does not have exactly n containers,
// all in state.
func wantContainers(name string, n int, state string) error {
	states, err := containerStates(name)
	if err != nil {
		return err
	}
	in := 0
	for _, st := range states {
		if st == state {
			in++
		}
	}
	if len(states) != n || in != n {
		return fmt.Errorf("containers of %s: %v, want %d %s", name, states, n, state)
	}
	return nil
}

// Item: record first. A worker killed at boot right after it recorded its
// crashed predecessor's orphan, and before it failed the job, leaves the
// record and the job still active; the next boot fails the job with that one
// record. A run killed right after writing its record, before reporting it,
// is reported by the restarted worker with that record's outcome. With the
// state change first, either kill would leave a finished job with no record
// (or one that disagrees), and the next boot would skip it.
func TestFleetRecordFirstBootKill(t *testing.T) {
	t.Parallel()
	s := newScenario(t, "bootkill")
	router := enqueue.NewRouter(s.producer(), enqueue.RouterConfig{})

	// The run's record, then a kill before the report.
	r := s.faultWorker("b2", map[string]string{envCrashAt: faultpoint.RunRecorded})
	ran := r.start()
	ran.waitEvent("worker_started", 60*time.Second, nil)
	s.waitLive(r)
	runID := s.jobID("run", 0)
	s.enqueueForge(router, runID, forgeJob("acme/bootkill", "", "JOB_SLEEP=300ms\nJOB_PRINT_EXIT_LINE=1"))
	ran.crashed(90 * time.Second)
	if rec := s.onlyRecord(runID); rec.Outcome != jobs.OutcomeCompleted {
		t.Fatalf("the killed run's record: %+v, want completed", rec.Record)
	}
	s.wantState(runID, queue.StateActive)
	r.crashAt("")
	after := r.start()
	after.waitEvent("job_orphan_failed", 60*time.Second, jobIs(runID))
	s.wantState(runID, queue.StateCompleted)
	if rec := s.onlyRecord(runID); rec.Outcome != jobs.OutcomeCompleted || rec.ExitCode == nil || *rec.ExitCode != 0 {
		t.Fatalf("after the restart: %+v, want the run's own completed record", rec.Record)
	}

	// The orphan's record at boot, then a kill before the job is failed.
	b := s.faultWorker("b1", nil)
	first := b.start()
	first.waitEvent("worker_started", 60*time.Second, nil)
	after.stop(40 * time.Second) // the long job is b1's
	id := s.jobID("boot", 0)
	s.enqueueForge(router, id, forgeJob("acme/bootkill", "", "JOB_SLEEP=120s"))
	first.waitEvent("job_started", 60*time.Second, jobIs(id))
	first.signal(syscall.SIGKILL)
	first.crashed(10 * time.Second)
	b.crashAt(faultpoint.OrphanRecorded)
	b.start().crashed(90 * time.Second)
	if rec := s.onlyRecord(id); rec.Outcome != jobs.OutcomeFailed || rec.Reason != jobs.ReasonStalled || rec.dir != b.logsDir {
		t.Fatalf("the killed boot's record: %+v in %s, want failed/stalled in %s", rec.Record, rec.dir, b.logsDir)
	}
	s.wantState(id, queue.StateActive) // record first: the kill came before the state change
	b.crashAt("")
	third := b.start()
	third.waitEvent("job_orphan_failed", 60*time.Second, jobIs(id))
	s.wantState(id, queue.StateFailed)
	if rec := s.onlyRecord(id); rec.Reason != jobs.ReasonStalled {
		t.Fatalf("after the finishing boot: %+v, want the one stalled record", rec.Record)
	}
	s.settle(60 * time.Second)
	s.report("record-first-boot", s.figuresOf([]string{runID, id}), "killed at run-recorded and orphan-recorded")
	third.stop(40 * time.Second)
}

// Item: record first, in the stalled check. A host whose stalled check
// wrote the record of a dead host's job and was killed before failing it
// leaves the record and the job active; restarted, its check fails the job
// and keeps that record. With the state change first, the kill would leave
// the job failed with no record, and no later check would see it.
func TestFleetRecordFirstStalledKill(t *testing.T) {
	t.Parallel()
	s := newScenario(t, "stallkill")
	v := s.worker("v1", nil)
	victim := v.start()
	victim.waitEvent("worker_started", 60*time.Second, nil)
	s.waitLive(v)
	router := enqueue.NewRouter(s.producer(), enqueue.RouterConfig{})
	id := s.jobID("stall", 0)
	s.enqueueForge(router, id, forgeJob("acme/stallkill", "", "JOB_SLEEP=150s"))
	victim.waitEvent("job_started", 60*time.Second, jobIs(id))

	c := s.faultWorker("c1", map[string]string{envCrashAt: faultpoint.StalledRecorded})
	checker := c.start()
	checker.waitEvent("worker_started", 60*time.Second, nil)
	victim.signal(syscall.SIGKILL)
	victim.crashed(10 * time.Second)
	killedAt := time.Now()
	// The lock lapses within LockTTL (30 s); the check runs every 30 s.
	checker.crashed(150 * time.Second)
	t.Logf("the checker recorded and was killed %s after the victim", time.Since(killedAt).Round(time.Second))
	if rec := s.onlyRecord(id); rec.Reason != jobs.ReasonStalled || rec.dir != c.logsDir || rec.Host != v.name {
		t.Fatalf("the killed check's record: %+v in %s, want failed/stalled of %s in %s", rec.Record, rec.dir, v.name, c.logsDir)
	}
	s.wantState(id, queue.StateActive)
	c.crashAt("")
	restarted := c.start()
	restarted.waitEvent("job_stalled", 120*time.Second, jobIs(id))
	s.wantState(id, queue.StateFailed)
	if rec := s.onlyRecord(id); rec.Reason != jobs.ReasonStalled || rec.dir != c.logsDir {
		t.Fatalf("after the restarted check: %+v in %s", rec.Record, rec.dir)
	}
	s.settle(60 * time.Second)
	s.report("record-first-stalled", s.figuresOf([]string{id}), "checker killed at stalled-recorded")
	restarted.stop(40 * time.Second)
}

// Item: one record when a frozen worker wakes. A worker frozen (SIGSTOP)
// while its job runs, past its lock: the other host's stalled check fails
// the job and records it stalled. The container ends meanwhile (exit 3).
// Thawed, the frozen worker finds the attempt claimed: it writes no second
// record file, and the attempt's mirror entry gets the container's real exit
// code and telemetry.
func TestFleetFrozenWorkerWakes(t *testing.T) {
	t.Parallel()
	s := newScenario(t, "freeze")
	f := s.worker("f1", nil)
	frozen := f.start()
	frozen.waitEvent("worker_started", 60*time.Second, nil)
	s.waitLive(f)
	router := enqueue.NewRouter(s.producer(), enqueue.RouterConfig{})
	id := s.jobID("frozen", 0)
	s.enqueueForge(router, id, forgeJob("acme/freeze", "", "JOB_SLEEP=3s\nJOB_EXIT_CODE=3\nJOB_PRINT_EXIT_LINE=1"))
	// Frozen once the container runs (job_started comes before it is
	// created): it ends during the freeze.
	frozen.waitEvent("job_container_started", 60*time.Second, containerOf(id))
	frozen.signal(syscall.SIGSTOP)
	stoppedAt := time.Now()

	c := s.worker("c1", nil)
	checker := c.start()
	checker.waitEvent("job_stalled", 150*time.Second, jobIs(id))
	t.Logf("the checker failed the frozen worker's job %s after SIGSTOP", time.Since(stoppedAt).Round(time.Second))
	if rec := s.onlyRecord(id); rec.Reason != jobs.ReasonStalled || rec.dir != c.logsDir || rec.ExitCode != nil {
		t.Fatalf("the checker's record: %+v in %s", rec.Record, rec.dir)
	}
	frozen.signal(syscall.SIGCONT)
	frozen.waitEvent("run_record_claimed_elsewhere", 60*time.Second, jobIs(id))
	s.settle(60 * time.Second)
	rec := s.onlyRecord(id)
	if rec.Reason != jobs.ReasonStalled || rec.dir != c.logsDir {
		t.Fatalf("after the thaw: %+v in %s, want the checker's one stalled record", rec.Record, rec.dir)
	}
	var mirrored jobs.Record
	s.eventually(20*time.Second, func(ctx context.Context) error {
		key, err := runRecordKey(ctx, s.client, id)
		if err != nil {
			return err
		}
		body, err := s.client.Get(ctx, key).Bytes()
		if err != nil {
			return err
		}
		if err := json.Unmarshal(body, &mirrored); err != nil {
			return err
		}
		if mirrored.ExitCode == nil || *mirrored.ExitCode != 3 || !strings.Contains(string(mirrored.Telemetry), `"turns":3`) {
			return fmt.Errorf("mirror entry %s: %s/%s exit %s telemetry %s by %s, want exit code 3 and the exit line",
				key, mirrored.Outcome, mirrored.Reason, exitText(mirrored.ExitCode), mirrored.Telemetry, mirrored.Host)
		}
		return nil
	})
	s.report("frozen-wakes", s.figuresOf([]string{id}), fmt.Sprintf("mirror %s/%s exit %d from %s", mirrored.Outcome, mirrored.Reason, *mirrored.ExitCode, mirrored.Host))
	frozen.stop(40 * time.Second)
	checker.stop(40 * time.Second)
}

// Item: the real outcome after a crash. A worker killed while three jobs
// run; their containers finish while it is down, with exit 0, 2 and 1.
// Restarted, it records what they did (completed, policy, failed/exit-1,
// with their exit codes), not stalled, and only then removes the
// containers. Each record has the telemetry of the exit line the job
// printed after the kill: the output its predecessor copied ends at the
// kill, and the reaper reads the end of the container's log from Docker.
func TestFleetRealOutcomeAfterCrash(t *testing.T) {
	t.Parallel()
	s := newScenario(t, "outcome")
	o := s.worker("o1", map[string]string{"PI_CONCURRENCY": "3"})
	first := o.start()
	first.waitEvent("worker_started", 60*time.Second, nil)
	s.waitLive(o)
	want := []struct {
		code    int
		outcome string
		reason  jobs.Reason
		final   queue.State
	}{
		{0, jobs.OutcomeCompleted, jobs.ReasonCompleted, queue.StateCompleted},
		{2, jobs.OutcomePolicy, jobs.ReasonPolicy, queue.StateCompleted},
		{1, jobs.OutcomeFailed, jobs.ReasonExit1, queue.StateFailed},
	}
	var ids []string
	for i, w := range want {
		id := s.jobID("exit", i)
		task := fmt.Sprintf("JOB_SLEEP=6s\nJOB_EXIT_CODE=%d\nJOB_PRINT_EXIT_LINE=1", w.code)
		s.addJob(fleet.SharedQueue, id, forgeJob("acme/outcome", "", task), 1)
		ids = append(ids, id)
	}
	for _, id := range ids {
		first.waitEvent("job_container_started", 60*time.Second, containerOf(id))
	}
	s.eventually(60*time.Second, func(context.Context) error {
		return wantContainers(o.name, len(ids), "running")
	})
	first.signal(syscall.SIGKILL)
	first.crashed(10 * time.Second)
	s.eventually(60*time.Second, func(context.Context) error {
		return wantContainers(o.name, len(ids), "exited")
	})
	restarted := o.start()
	restarted.waitEvent("worker_started", 60*time.Second, nil)
	for _, id := range ids {
		restarted.waitEvent("job_orphan_failed", 30*time.Second, jobIs(id))
	}
	missingTelemetry := 0
	for i, w := range want {
		rec := s.onlyRecord(ids[i])
		if rec.Outcome != w.outcome || rec.Reason != w.reason || rec.ExitCode == nil || *rec.ExitCode != w.code {
			t.Errorf("job exiting %d: record %s/%s exit %s, want %s/%s\n%s", w.code, rec.Outcome, rec.Reason, exitText(rec.ExitCode), w.outcome, w.reason, s.trail(ids[i]))
		}
		// The exit line came after the kill: only Docker's log of the
		// container has it, not the output the dead worker was copying.
		if !strings.Contains(string(rec.Telemetry), `"turns":3`) {
			missingTelemetry++
			t.Errorf("job exiting %d: telemetry %s, want the exit line printed after the kill", w.code, rec.Telemetry)
		}
		s.wantState(ids[i], w.final)
	}
	s.eventually(30*time.Second, func(context.Context) error {
		if ids, err := containersOf(o.name); err != nil || len(ids) != 0 {
			return fmt.Errorf("containers of %s left after their jobs were recorded: %v (%v)", o.name, ids, err)
		}
		return nil
	})
	s.settle(60 * time.Second)
	s.report("real-outcome", s.figuresOf(ids), fmt.Sprintf("worker killed mid-run, containers exited 0/2/1 while it was down; %d of %d records without the exit line's telemetry", missingTelemetry, len(ids)))
	restarted.stop(40 * time.Second)
}
