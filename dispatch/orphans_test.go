package dispatch

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pidispatch/pidispatch/capabilities"
	"github.com/pidispatch/pidispatch/dispatch/container"
	"github.com/pidispatch/pidispatch/dispatch/internal/jobdir"
	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/internal/secretprofile"
	"github.com/pidispatch/pidispatch/internal/testkit/logtest"
	"github.com/pidispatch/pidispatch/jobs"
)

// orphanRuntime reaps as told and counts runs (it never runs a container).
type orphanRuntime struct {
	reap container.ReapReport

	mu   sync.Mutex
	runs []string
}

var _ Runtime = (*orphanRuntime)(nil)

func (r *orphanRuntime) Run(_ context.Context, spec container.Spec) (container.Result, error) {
	r.mu.Lock()
	r.runs = append(r.runs, spec.JobID)
	r.mu.Unlock()
	now := time.Now()
	return container.Result{ExitCode: 0, StartedAt: now, EndedAt: now}, nil
}

func (r *orphanRuntime) Reap(context.Context, string) (container.ReapReport, error) {
	return r.reap, nil
}

func (r *orphanRuntime) ImagePresent(context.Context, string) (bool, error) { return true, nil }

func (r *orphanRuntime) ImageDigest(context.Context, string) (string, error) { return "", nil }

func (r *orphanRuntime) ran() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.runs...)
}

// orphanRegistry proves (or fails to prove) that this process holds its name.
type orphanRegistry struct{ publishErr error }

var _ Registry = (*orphanRegistry)(nil)

func (r *orphanRegistry) Start(context.Context) error                           { return nil }
func (r *orphanRegistry) Publish(context.Context) error                         { return r.publishErr }
func (r *orphanRegistry) ReadLive(context.Context) ([]capabilities.Host, error) { return nil, nil }
func (r *orphanRegistry) Close(context.Context) error                           { return nil }

// orphanFixture is one worker name's queues and folders, on the fakes of
// package dispatchtest: no Valkey, no Docker.
type orphanFixture struct {
	cfg    Config
	tune   Tuning
	shared fixtureQueue // as the worker's consumer sees it (processedBy = name)
	fake   FakeQueue    // the fake behind shared
	// fakeMirror is the fleet's mirror, shared by the workers of copies of
	// the fixture; mirrored reads it.
	fakeMirror RunMirror
	mirrored   func() []jobs.Record
	cap        int       // the budget's daily cap; 0 is the default
	mirror     bool      // the worker mirrors its runs (and claims its records)
	dir        Directory // the worker's fleet directory; nil: none
}

// newFakeOrphanFixture is a fixture with an empty shared queue.
func newFakeOrphanFixture(t *testing.T) *orphanFixture {
	t.Helper()
	cfg := DefaultConfig()
	cfg.WorkerName, cfg.WorkerNameDeclared = "orph", true
	cfg.LogsDir = t.TempDir()
	cfg.FolderRoots, cfg.ContainerUserExplicit = []string{os.TempDir()}, true
	cfg.UnsignedQueues = []string{fleet.EveryQueue} // the fixture's jobs carry no signature
	fq := TestFakes.Queue(fleet.SharedQueue, cfg.WorkerName)
	m, read := TestFakes.Mirror()
	return &orphanFixture{cfg: cfg, tune: Tuning{JobsDir: t.TempDir()}, shared: fakeShared{fq}, fake: fq, fakeMirror: m, mirrored: read}
}

// fixtureQueue is the fixture's shared queue in the Valkey queue's terms
// (package queue), so the tests read as they did on Valkey.
type fixtureQueue interface {
	Add(ctx context.Context, name string, data json.RawMessage, opts fxAddOptions) (string, bool, error)
	Fetch(ctx context.Context, token string) (*fxJob, error)
	Get(ctx context.Context, id string) (*fxJob, error)
	Unlocked(ctx context.Context) ([]string, error)
}

// fakeShared is a fake queue as a fixtureQueue.
type fakeShared struct{ q FakeQueue }

func (f fakeShared) Add(_ context.Context, _ string, data json.RawMessage, opts fxAddOptions) (string, bool, error) {
	return opts.JobID, f.q.AddJob(opts.JobID, data, opts.Attempts), nil
}

func (f fakeShared) Fetch(_ context.Context, token string) (*fxJob, error) {
	return f.queueJob(f.q.Take(token)), nil
}

func (f fakeShared) Get(ctx context.Context, id string) (*fxJob, error) {
	j, err := f.q.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	return f.queueJob(j), nil
}

func (f fakeShared) Unlocked(ctx context.Context) ([]string, error) { return f.q.Unlocked(ctx) }

func (f fakeShared) queueJob(j *HeldJob) *fxJob {
	if j == nil {
		return nil
	}
	return &fxJob{ID: j.ID, Data: j.Data, DedupID: j.DedupID, AttemptsMade: j.AttemptsMade,
		ProcessedOn: j.ProcessedOn, SchedulerID: j.SchedulerID, ProcessedBy: j.ProcessedBy,
		State: j.State, FailedReason: f.q.FailedReason(j.ID)}
}

// jobQueue is the shared queue as the worker holds jobs on it.
func (f *orphanFixture) jobQueue() JobQueue { return f.fake }

// worker builds a Worker of the fixture's name over the shared queue.
func (f *orphanFixture) worker(t *testing.T, rt Runtime, reg Registry, logs *bytes.Buffer) *Worker {
	t.Helper()
	tune := f.tune
	tune.Logger = slog.New(slog.DiscardHandler)
	if logs != nil {
		tune.Logger = slog.New(slog.NewJSONHandler(logs, nil))
	}
	deps := Deps{Stores: Stores{Queues: []JobQueue{f.jobQueue()}, Registry: reg}, Runtime: rt, Secrets: secretprofile.Resolver{}}
	deps.Source = f.fake.Source()
	deps.Budget = TestFakes.Budget(f.cap)
	if f.mirror {
		deps.Mirror = f.fakeMirror
	}
	if f.dir != nil {
		deps.Directory = f.dir
	}
	w, err := NewWorker(f.cfg, deps, tune)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// leaveOrphan adds a job, takes it as a run of this worker does and writes
// its folder (the held note with noteToken) exactly as a run does right
// before its container starts; then the process "dies": nothing reports.
func (f *orphanFixture) leaveOrphan(t *testing.T, id, noteToken string) (lockToken string) {
	t.Helper()
	ctx := context.Background()
	data, _ := json.Marshal(jobs.Job{Kind: jobs.KindForge, Repo: "acme/orphan", Flow: "fix", Task: "t"})
	if _, _, err := f.shared.Add(ctx, fxJobName, data, fxAddOptions{JobID: id, Attempts: 3}); err != nil {
		t.Fatal(err)
	}
	lockToken = "lock-" + id
	job, err := f.shared.Fetch(ctx, lockToken)
	if err != nil || job == nil || job.ID != id {
		t.Fatalf("fetch %s: %v %v", id, job, err)
	}
	if noteToken == "" {
		noteToken = lockToken
	}
	spec, err := jobs.ParseJob(job.Data)
	if err != nil {
		t.Fatal(err)
	}
	dead := f.worker(t, &orphanRuntime{}, &orphanRegistry{}, nil)
	if err := os.MkdirAll(dead.jobsDir(), 0o750); err != nil {
		t.Fatal(err)
	}
	h := &held{q: f.jobQueue(), job: heldOf(job), token: noteToken, spec: spec, rec: jobs.Record{Attempt: 1}}
	if _, _, _, err := dead.prepareDirs(h); err != nil {
		t.Fatal(err)
	}
	return lockToken
}

// boot runs a fresh worker of the same name until stop is called.
func (f *orphanFixture) boot(t *testing.T, rt Runtime, reg Registry) (logs func() string, stop func()) {
	t.Helper()
	var buf logtest.Buffer
	w := f.worker(t, rt, reg, nil)
	w.log = slog.New(slog.NewJSONHandler(&buf, nil)).With("host", f.cfg.WorkerName)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Run: %v", err)
				}
			case <-time.After(30 * time.Second):
				t.Error("worker did not stop")
			}
		})
	}
	t.Cleanup(stop)
	deadline := time.Now().Add(10 * time.Second)
	for {
		started := strings.Contains(buf.String(), `"msg":"worker_started"`)
		if started {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no worker_started")
		}
		time.Sleep(20 * time.Millisecond)
	}
	return buf.String, stop
}

// A worker restarted under its name after a crash fails the job its dead
// predecessor held at boot, as stalled and without a retry, records it, and
// removes every folder the crash left; a note whose token no longer holds
// the lock, a junk note and a folder without a note fail nothing.
func TestRestartFailsOwnOrphansAtBoot(t *testing.T) {
	f := newFakeOrphanFixture(t)
	f.leaveOrphan(t, "orphan-1", "")
	f.leaveOrphan(t, "held-elsewhere", "not-the-lock-token")
	jobsDir := filepath.Join(f.tune.JobsDir, f.cfg.WorkerName)
	for name, note := range map[string]string{"junk-1": "\x00{not json", "empty-1": ""} {
		if err := os.Mkdir(filepath.Join(jobsDir, name), 0o750); err != nil {
			t.Fatal(err)
		}
		if note != "" {
			if err := os.WriteFile(filepath.Join(jobsDir, name, jobdir.NoteName), []byte(note), 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Another worker's folders on the same machine are not this worker's.
	other := filepath.Join(f.tune.JobsDir, "other", "x-1")
	if err := os.MkdirAll(other, 0o750); err != nil {
		t.Fatal(err)
	}

	rt := &orphanRuntime{reap: container.ReapReport{Enumerated: true, Found: 1, Removed: 1}}
	began := time.Now()
	logs, stop := f.boot(t, rt, &orphanRegistry{})

	ctx := context.Background()
	j, err := f.shared.Get(ctx, "orphan-1")
	if err != nil || j.State != StateFailed || j.FailedReason != string(jobs.ReasonStalled) || j.AttemptsMade != 1 {
		t.Fatalf("orphan after boot: %+v %v; want failed as stalled, one attempt, no retry", j, err)
	}
	if time.Since(began) > 20*time.Second { // a hang-catching bound, below the 30 s lock a stalled check would wait out
		t.Fatalf("the orphan took %s to fail", time.Since(began))
	}
	data, err := os.ReadFile(filepath.Join(f.cfg.LogsDir, jobs.RecordName(fleet.SharedQueue, "orphan-1", 1)))
	if err != nil {
		t.Fatal(err)
	}
	var rec jobs.Record
	if err := json.Unmarshal(data, &rec); err != nil {
		t.Fatal(err)
	}
	if rec.Outcome != jobs.OutcomeFailed || rec.Reason != jobs.ReasonStalled || rec.Host != "orph" || rec.Kind != jobs.KindForge || rec.Target != "acme/orphan" || rec.Attempt != 1 || rec.ExitCode != nil {
		t.Fatalf("record %+v", rec)
	}
	if j, err := f.shared.Get(ctx, "held-elsewhere"); err != nil || j.State != StateActive {
		t.Fatalf("a job whose lock the note's token does not hold must be left alone: %+v %v", j, err)
	}
	if _, err := os.Stat(filepath.Join(f.cfg.LogsDir, jobs.RecordName(fleet.SharedQueue, "held-elsewhere", 1))); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a record for a job not failed: %v", err)
	}
	if left, _ := os.ReadDir(jobsDir); len(left) != 0 {
		t.Fatalf("folders left in %s: %d", jobsDir, len(left))
	}
	if _, err := os.Stat(other); err != nil {
		t.Fatalf("another worker's folder was touched: %v", err)
	}
	stop()
	if n := strings.Count(logs(), `"msg":"job_orphan_failed"`); n != 1 {
		t.Fatalf("%d job_orphan_failed lines, want 1:\n%s", n, logs())
	}
	if len(rt.ran()) != 0 {
		t.Fatalf("jobs ran: %v", rt.ran())
	}
}

// Without proof that no container of this name runs, or that this process
// holds the name, the orphan and its folder are left to the stalled check.
func TestOrphansLeftWithoutProof(t *testing.T) {
	for _, tc := range []struct {
		name string
		reap container.ReapReport
		reg  Registry
		why  string
	}{
		{"reaper-did-not-enumerate", container.ReapReport{}, &orphanRegistry{}, "reaper"},
		{"reaper-left-a-container", container.ReapReport{Enumerated: true, Found: 1}, &orphanRegistry{}, "reaper"},
		{"name-not-proven", container.ReapReport{Enumerated: true}, &orphanRegistry{publishErr: errors.New("registry unreachable")}, "name"},
		{"no-registry", container.ReapReport{Enumerated: true}, nil, "registry"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeOrphanFixture(t)
			f.leaveOrphan(t, "orphan-2", "")
			logs, stop := f.boot(t, &orphanRuntime{reap: tc.reap}, tc.reg)
			stop()
			if j, err := f.shared.Get(context.Background(), "orphan-2"); err != nil || j.State != StateActive {
				t.Fatalf("orphan: %+v %v; want still active", j, err)
			}
			if left, _ := os.ReadDir(filepath.Join(f.tune.JobsDir, f.cfg.WorkerName)); len(left) != 1 {
				t.Fatalf("%d folders left, want the orphan's", len(left))
			}
			if !strings.Contains(logs(), `"msg":"orphaned_jobs_skipped"`) || !strings.Contains(logs(), tc.why) {
				t.Fatalf("no orphaned_jobs_skipped line naming the %s:\n%s", tc.why, logs())
			}
		})
	}
}

// fxJob is a job as the fixture's queue reports it.
type fxJob struct {
	ID           string
	Data         json.RawMessage
	DedupID      string
	AttemptsMade int
	ProcessedOn  time.Time
	SchedulerID  string
	ProcessedBy  string
	State        JobState
	FailedReason string
}

// fxAddOptions are the options of fixtureQueue.Add.
type fxAddOptions struct {
	JobID    string
	Attempts int
}

// fxJobName is the name jobs are added under (the fakes ignore it).
const fxJobName = "pi-job"

// stateDelayed is a deferred job's state on the queue.
const stateDelayed JobState = "delayed"

// heldOf is the Worker's view of a job the fixture's queue took.
func heldOf(j *fxJob) *HeldJob {
	return &HeldJob{ID: j.ID, Data: j.Data, DedupID: j.DedupID, AttemptsMade: j.AttemptsMade,
		SchedulerID: j.SchedulerID, ProcessedBy: j.ProcessedBy, State: JobState(j.State)}
}
