package dispatch

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pidispatch/pidispatch/dispatch/container"
	"github.com/pidispatch/pidispatch/dispatch/internal/jobdir"
	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/jobs"
)

// killedQueue is a queue whose process "dies" at the state change: Fail and
// Complete return an error without reaching Valkey, the way a SIGKILL right
// before them leaves things. It notes which records existed at that moment.
type killedQueue struct {
	JobQueue
	q       fixtureQueue
	logsDir string

	mu       sync.Mutex
	killed   bool
	recsSeen map[string]int // job id -> its records in logsDir when the state change came
}

var errKilled = errors.New("killed before the state change")

func (q *killedQueue) seen(id string) {
	recs, _ := jobs.ReadRecords(q.logsDir, id)
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.recsSeen == nil {
		q.recsSeen = map[string]int{}
	}
	q.recsSeen[id] = len(recs)
}

func (q *killedQueue) Fail(ctx context.Context, id, token, reason string, opts FailOptions) (bool, error) {
	q.seen(id)
	if q.killed {
		return false, errKilled
	}
	return q.JobQueue.Fail(ctx, id, token, reason, opts)
}

func (q *killedQueue) Complete(ctx context.Context, id, token string, result json.RawMessage) error {
	q.seen(id)
	if q.killed {
		return errKilled
	}
	return q.JobQueue.Complete(ctx, id, token, result)
}

// Unlocked lists what the next stalled check acts on, as the queue under it
// does, so the worker writes its records before the check.
func (q *killedQueue) Unlocked(ctx context.Context) ([]string, error) { return q.q.Unlocked(ctx) }

func (q *killedQueue) CheckStalled(ctx context.Context) (Stalled, error) {
	ids, err := q.q.Unlocked(ctx)
	if err != nil {
		return Stalled{}, err
	}
	for _, id := range ids {
		q.seen(id)
	}
	if q.killed {
		return Stalled{}, errKilled
	}
	return q.JobQueue.CheckStalled(ctx)
}

// A boot killed between an orphan's record and its failure leaves the
// record and the folder; the next boot fails the job and keeps the one
// record. Before, the job was failed first, then recorded, and the folder
// went whatever happened.
func TestOrphanIsRecordedBeforeItFails(t *testing.T) {
	f := newFakeOrphanFixture(t)
	f.leaveOrphan(t, "orphan-rf", "")
	rt := &orphanRuntime{reap: container.ReapReport{Enumerated: true}}
	kq := &killedQueue{JobQueue: f.jobQueue(), q: f.shared, logsDir: f.cfg.LogsDir, killed: true}

	w := f.worker(t, rt, &orphanRegistry{}, nil)
	w.deps.Queues = []JobQueue{kq}
	w.failOrphans(context.Background(), true)
	if kq.recsSeen["orphan-rf"] != 1 {
		t.Fatalf("records when the job was failed: %d, want 1 (the record comes first)", kq.recsSeen["orphan-rf"])
	}
	ctx := context.Background()
	if j, err := f.shared.Get(ctx, "orphan-rf"); err != nil || j.State != StateActive {
		t.Fatalf("after the killed boot: %+v %v", j, err)
	}
	if left, _ := os.ReadDir(w.jobsDir()); len(left) != 1 {
		t.Fatalf("%d folders after the killed boot, want the orphan's kept", len(left))
	}

	// The next boot finishes it.
	kq.killed = false
	w.failOrphans(ctx, true)
	j, err := f.shared.Get(ctx, "orphan-rf")
	if err != nil || j.State != StateFailed || j.FailedReason != string(jobs.ReasonStalled) {
		t.Fatalf("after the second boot: %+v %v", j, err)
	}
	recs, err := jobs.ReadRecords(f.cfg.LogsDir, "orphan-rf")
	if err != nil || len(recs) != 1 || recs[0].Reason != jobs.ReasonStalled || recs[0].Attempt != 1 {
		t.Fatalf("records %+v %v, want one stalled record of attempt 1", recs, err)
	}
	if left, _ := os.ReadDir(w.jobsDir()); len(left) != 0 {
		t.Fatalf("%d folders left", len(left))
	}
}

// A run that wrote its record and died before reporting it: the restarted
// worker reports the recorded outcome instead of overwriting it as stalled.
func TestOrphanWithItsRecordReportsIt(t *testing.T) {
	f := newFakeOrphanFixture(t)
	f.leaveOrphan(t, "orphan-done", "")
	code := 0
	now := time.Now()
	rec := jobs.Record{Queue: fleet.SharedQueue, JobID: "orphan-done", Kind: jobs.KindForge, Target: "acme/orphan", Flow: "fix", StartedAt: now.Add(-time.Minute),
		EndedAt: now, Outcome: jobs.OutcomeCompleted, Reason: jobs.ReasonCompleted, ExitCode: &code, Attempt: 1, Host: "orph", Image: "img",
		Telemetry: json.RawMessage(`{"event":"exit","cost":1.5}`)}
	if _, err := jobs.WriteRecord(f.cfg.LogsDir, rec); err != nil {
		t.Fatal(err)
	}
	w := f.worker(t, &orphanRuntime{}, &orphanRegistry{}, nil)
	w.failOrphans(context.Background(), true)
	j, err := f.shared.Get(context.Background(), "orphan-done")
	if err != nil || j.State != StateCompleted {
		t.Fatalf("job %+v %v, want completed as its record says", j, err)
	}
	recs, err := jobs.ReadRecords(f.cfg.LogsDir, "orphan-done")
	if err != nil || len(recs) != 1 || recs[0].Reason != jobs.ReasonCompleted || string(recs[0].Telemetry) != `{"event":"exit","cost":1.5}` {
		t.Fatalf("records %+v %v, want the run's own", recs, err)
	}
}

// The stalled check writes a stalled job's record before it fails the job,
// under the attempt that ran (a retry's stall does not overwrite the first
// attempt's record).
func TestStalledJobIsRecordedBeforeItFails(t *testing.T) {
	f := newFakeOrphanFixture(t)
	ctx := context.Background()
	data, _ := json.Marshal(jobs.Job{Kind: jobs.KindForge, Repo: "acme/stall", Flow: "fix", Task: "t"})
	if !f.fake.AddJob("stall-1", data, 3) {
		t.Fatal("not added")
	}
	// Attempt 1 failed (and was recorded); attempt 2 is taken, by host
	// "gone", and its holder dies.
	if j := f.fake.TakeAs("t1", "gone"); j == nil {
		t.Fatal("nothing to take")
	}
	first := jobs.Record{JobID: "stall-1", Kind: jobs.KindForge, Target: "acme/stall", StartedAt: time.Now(), EndedAt: time.Now(),
		Outcome: jobs.OutcomeFailed, Reason: jobs.ReasonExit1, Attempt: 1, Host: "gone"}
	if _, err := jobs.WriteRecord(f.cfg.LogsDir, first); err != nil {
		t.Fatal(err)
	}
	if _, err := f.fake.Fail(ctx, "stall-1", "t1", string(jobs.ReasonExit1), FailOptions{}); err != nil {
		t.Fatal(err)
	}
	if j := f.fake.TakeAs("t2", "gone"); j == nil {
		t.Fatal("no retry to take")
	}
	f.fake.ExpireLock("stall-1")

	kq := &killedQueue{JobQueue: f.jobQueue(), q: f.shared, logsDir: f.cfg.LogsDir, killed: true}
	w := f.worker(t, &orphanRuntime{}, &orphanRegistry{}, nil)
	w.deps.Queues = []JobQueue{kq}
	w.checkStalled(ctx) // killed at the state change
	if kq.recsSeen["stall-1"] != 2 {
		t.Fatalf("records when the check ran: %d, want 2 (attempt 1's and the stalled attempt 2's)", kq.recsSeen["stall-1"])
	}
	kq.killed = false
	w.checkStalled(ctx)
	if j, err := f.shared.Get(ctx, "stall-1"); err != nil || j.State != StateFailed || j.FailedReason != string(jobs.ReasonStalled) {
		t.Fatalf("job %+v %v, want failed as stalled", j, err)
	}
	recs, err := jobs.ReadRecords(f.cfg.LogsDir, "stall-1")
	if err != nil || len(recs) != 2 {
		t.Fatalf("records %+v %v, want 2", recs, err)
	}
	if recs[0].Reason != jobs.ReasonExit1 || recs[1].Reason != jobs.ReasonStalled || recs[1].Attempt != 2 || recs[1].Host != "gone" {
		t.Fatalf("records %+v", recs)
	}
	if _, err := os.Stat(filepath.Join(f.cfg.LogsDir, jobs.RecordName(fleet.SharedQueue, "stall-1", 3))); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a record of an attempt that never ran: %v", err)
	}
}

// frozenRuntime runs a "container" until its run is stopped (the worker
// found its lock lost), then reports a kill with the job's exit line.
type frozenRuntime struct {
	orphanRuntime
	started chan struct{}
}

func (r *frozenRuntime) Run(ctx context.Context, spec container.Spec) (container.Result, error) {
	close(r.started)
	began := time.Now()
	<-ctx.Done()
	return container.Result{ExitCode: 137, StartedAt: began, EndedAt: time.Now(),
		Telemetry: &container.Telemetry{Raw: json.RawMessage(`{"event":"exit","cost":2.5}`)}}, nil
}

// A worker frozen past its lock wakes after another host's stalled check
// failed and recorded its job: one record file between the two hosts (the
// checker's, which claimed the attempt first), and the mirror keeps the
// waking worker's better facts (its real exit code and telemetry).
func TestFrozenWorkerWakingWritesNoSecondRecord(t *testing.T) {
	frozen := newFakeOrphanFixture(t)
	frozen.mirror = true
	// It renews, and so notices the lost lock, every LockTTL/3: 3 s leaves the
	// checker time to fail the job first, even on a loaded machine.
	frozen.tune.LockTTL = 9 * time.Second
	checker := *frozen
	checker.cfg.WorkerName, checker.cfg.LogsDir = "checker", t.TempDir()
	ctx := context.Background()
	data, _ := json.Marshal(jobs.Job{Kind: jobs.KindForge, Repo: "acme/frozen", Flow: "fix", Task: "t"})
	if _, _, err := frozen.shared.Add(ctx, fxJobName, data, fxAddOptions{JobID: "frozen-1"}); err != nil {
		t.Fatal(err)
	}
	rt := &frozenRuntime{orphanRuntime: orphanRuntime{reap: container.ReapReport{Enumerated: true}}, started: make(chan struct{})}
	_, stop := frozen.boot(t, rt, &orphanRegistry{})
	select {
	case <-rt.started:
	case <-time.After(20 * time.Second):
		t.Fatal("the job never started")
	}
	// The freeze: the lock expires while the holder sleeps.
	frozen.fake.ExpireLock("frozen-1")
	cw := checker.worker(t, &orphanRuntime{}, &orphanRegistry{}, nil)
	cw.checkStalled(ctx)
	if j, err := frozen.shared.Get(ctx, "frozen-1"); err != nil || j.State != StateFailed || j.FailedReason != string(jobs.ReasonStalled) {
		t.Fatalf("job %+v %v, want failed as stalled by the checker", j, err)
	}
	// The holder wakes, finds its lock gone and stops its run.
	deadline := time.Now().Add(15 * time.Second)
	var mirrored jobs.Record
	for {
		// The mirror keeps one record per attempt, the last one written.
		var got []jobs.Record
		for _, r := range frozen.mirrored() {
			if r.JobID == "frozen-1" && r.Attempt == 1 {
				got = append(got, r)
			}
		}
		if len(got) > 0 && got[len(got)-1].ExitCode != nil {
			mirrored = got[len(got)-1]
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the mirror never got the waking worker's facts: %+v", got)
		}
		time.Sleep(50 * time.Millisecond)
	}
	stop()
	if *mirrored.ExitCode != 137 || string(mirrored.Telemetry) != `{"event":"exit","cost":2.5}` || mirrored.Host != "orph" || mirrored.Reason != jobs.ReasonStalled {
		t.Fatalf("mirrored %+v", mirrored)
	}
	mine, _ := jobs.ReadRecords(frozen.cfg.LogsDir, "frozen-1")
	theirs, _ := jobs.ReadRecords(checker.cfg.LogsDir, "frozen-1")
	if len(mine)+len(theirs) != 1 || len(theirs) != 1 {
		t.Fatalf("records: %d on the frozen host, %d on the checker; want the checker's one", len(mine), len(theirs))
	}
}

// A worker killed after its job's container exited 0 but before recording
// it: the restarted worker's reap finds the container exited, and the
// orphan is recorded and reported as what it was (completed, with the exit
// line of its output), not as stalled.
func TestOrphanWithAnExitedContainerGetsItsRealOutcome(t *testing.T) {
	f := newFakeOrphanFixture(t)
	f.leaveOrphan(t, "orphan-exited", "")
	jobsDir := filepath.Join(f.tune.JobsDir, f.cfg.WorkerName)
	dirs, err := os.ReadDir(jobsDir)
	if err != nil || len(dirs) != 1 {
		t.Fatalf("job folders %v %v", dirs, err)
	}
	out := "working\n" + `{"event":"exit","turns":4,"cost":0.75}` + "\n"
	if err := os.WriteFile(filepath.Join(jobsDir, dirs[0].Name(), jobdir.OutputName), []byte(out), 0o600); err != nil {
		t.Fatal(err)
	}
	rt := &orphanRuntime{reap: container.ReapReport{Enumerated: true, Found: 1, Removed: 1,
		Exited: []container.ExitedJob{{JobID: "orphan-exited", Container: "pi-job-orphan-exited", ExitCode: 0}}}}
	_, stop := f.boot(t, rt, &orphanRegistry{})
	stop()
	j, err := f.shared.Get(context.Background(), "orphan-exited")
	if err != nil || j.State != StateCompleted {
		t.Fatalf("job %+v %v, want completed", j, err)
	}
	recs, err := jobs.ReadRecords(f.cfg.LogsDir, "orphan-exited")
	if err != nil || len(recs) != 1 {
		t.Fatalf("records %+v %v", recs, err)
	}
	r := recs[0]
	if r.Outcome != jobs.OutcomeCompleted || r.ExitCode == nil || *r.ExitCode != 0 || string(r.Telemetry) != `{"event":"exit","turns":4,"cost":0.75}` {
		t.Fatalf("record %+v (telemetry %s)", r, r.Telemetry)
	}
}

// A worker killed mid-run copied the output only up to the kill: the exit
// line the job printed afterwards is in the engine's log, which the reap
// returns, and the record gets its telemetry from there.
func TestOrphanTelemetryFromTheEnginesLog(t *testing.T) {
	f := newFakeOrphanFixture(t)
	f.leaveOrphan(t, "orphan-late-exit", "")
	jobsDir := filepath.Join(f.tune.JobsDir, f.cfg.WorkerName)
	dirs, err := os.ReadDir(jobsDir)
	if err != nil || len(dirs) != 1 {
		t.Fatalf("job folders %v %v", dirs, err)
	}
	if err := os.WriteFile(filepath.Join(jobsDir, dirs[0].Name(), jobdir.OutputName), []byte("working\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	line := `{"event":"exit","turns":6,"cost":0.5}`
	rt := &orphanRuntime{reap: container.ReapReport{Enumerated: true, Exited: []container.ExitedJob{{JobID: "orphan-late-exit",
		Container: "pi-job-orphan-late-exit", ExitCode: 2, Stdout: []byte("working\nmore\n" + line + "\n")}}}}
	_, stop := f.boot(t, rt, &orphanRegistry{})
	stop()
	recs, err := jobs.ReadRecords(f.cfg.LogsDir, "orphan-late-exit")
	if err != nil || len(recs) != 1 {
		t.Fatalf("records %+v %v", recs, err)
	}
	if r := recs[0]; r.Outcome != jobs.OutcomePolicy || r.ExitCode == nil || *r.ExitCode != 2 || string(r.Telemetry) != line {
		t.Fatalf("record %+v (telemetry %s), want policy, exit 2 and the engine log's exit line", r, r.Telemetry)
	}
}

// keepingRuntime keeps its containers (as *runner.Docker does with
// Spec.KeepContainer) and notes, when one is removed, what was recorded.
type keepingRuntime struct {
	orphanRuntime
	logsDir string
	q       fixtureQueue

	mu      sync.Mutex
	kept    bool
	removed string
	atRm    int      // records of the job when its container was removed
	stateRm JobState // the job's state then
}

func (r *keepingRuntime) Run(ctx context.Context, spec container.Spec) (container.Result, error) {
	r.mu.Lock()
	r.kept = spec.KeepContainer && spec.OutputFile != ""
	r.mu.Unlock()
	now := time.Now()
	return container.Result{ExitCode: 0, StartedAt: now, EndedAt: now, Container: "pi-job-" + spec.JobID}, nil
}

func (r *keepingRuntime) RemoveContainer(ctx context.Context, name string) error {
	recs, _ := jobs.ReadRecords(r.logsDir, strings.TrimPrefix(name, "pi-job-"))
	j, _ := r.q.Get(ctx, strings.TrimPrefix(name, "pi-job-"))
	r.mu.Lock()
	defer r.mu.Unlock()
	r.removed, r.atRm = name, len(recs)
	if j != nil {
		r.stateRm = j.State
	}
	return nil
}

// A run's container is kept until its outcome is recorded and reported,
// then removed.
func TestRunKeepsItsContainerUntilRecorded(t *testing.T) {
	f := newFakeOrphanFixture(t)
	rt := &keepingRuntime{orphanRuntime: orphanRuntime{reap: container.ReapReport{Enumerated: true}}, logsDir: f.cfg.LogsDir, q: f.shared}
	data, _ := json.Marshal(jobs.Job{Kind: jobs.KindForge, Repo: "acme/keep", Flow: "fix", Task: "t"})
	if _, _, err := f.shared.Add(context.Background(), fxJobName, data, fxAddOptions{JobID: "keep-1"}); err != nil {
		t.Fatal(err)
	}
	_, stop := f.boot(t, rt, &orphanRegistry{})
	deadline := time.Now().Add(20 * time.Second)
	for {
		rt.mu.Lock()
		done := rt.removed != ""
		rt.mu.Unlock()
		if done {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the container was never removed")
		}
		time.Sleep(20 * time.Millisecond)
	}
	stop()
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if !rt.kept || rt.removed != "pi-job-keep-1" || rt.atRm != 1 || rt.stateRm != StateCompleted {
		t.Fatalf("kept %v, removed %q with %d records, job %s", rt.kept, rt.removed, rt.atRm, rt.stateRm)
	}
}

// keepingReaper reaps like *runner.Docker's ReapRunning: exited containers
// stay, reported, until the worker removes them.
type keepingReaper struct {
	orphanRuntime
	logsDir string
	mu      sync.Mutex
	removed map[string]int // container -> records in logsDir when removed
}

func (r *keepingReaper) ReapRunning(ctx context.Context, worker string) (container.ReapReport, error) {
	return r.reap, nil
}

func (r *keepingReaper) RemoveContainer(_ context.Context, name string) error {
	recs, _ := jobs.ReadRecords(r.logsDir, "orphan-kept")
	r.mu.Lock()
	defer r.mu.Unlock()
	r.removed[name] = len(recs)
	return nil
}

// At boot, exited containers are removed only after their jobs are recorded.
func TestBootRemovesExitedContainersAfterRecording(t *testing.T) {
	f := newFakeOrphanFixture(t)
	f.leaveOrphan(t, "orphan-kept", "")
	rt := &keepingReaper{logsDir: f.cfg.LogsDir, removed: map[string]int{}}
	rt.reap = container.ReapReport{Enumerated: true, Exited: []container.ExitedJob{
		{JobID: "orphan-kept", Container: "pi-job-orphan-kept", ExitCode: 1},
		{JobID: "long-done", Container: "pi-job-long-done", ExitCode: 0}, // its run was recorded and reported
	}}
	_, stop := f.boot(t, rt, &orphanRegistry{})
	stop()
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if n, ok := rt.removed["pi-job-orphan-kept"]; !ok || n != 1 {
		t.Fatalf("removed %v, want the orphan's container removed after its one record", rt.removed)
	}
	if _, ok := rt.removed["pi-job-long-done"]; !ok {
		t.Fatalf("removed %v: the finished run's container was left", rt.removed)
	}
	// Attempt 1 is recorded as it ended (exit 1, retried); the retry may have run since.
	recs, _ := jobs.ReadRecords(f.cfg.LogsDir, "orphan-kept")
	if len(recs) < 1 || recs[0].Attempt != 1 || recs[0].Reason != jobs.ReasonExit1 || *recs[0].ExitCode != 1 {
		t.Fatalf("records %+v", recs)
	}
}
