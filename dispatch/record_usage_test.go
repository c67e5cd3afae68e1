package dispatch_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/dispatch/container"
	"github.com/pidispatch/pidispatch/dispatch/dispatchtest"
	"github.com/pidispatch/pidispatch/jobs"
)

// testClock is a clock a test moves.
type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *testClock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// movingSource moves the clock before it hands out a job's later takes, so
// the time between two pickups is exact.
type movingSource struct {
	dispatch.JobSource
	mu    sync.Mutex
	takes int
	clock *testClock
	step  time.Duration
}

func (s *movingSource) Next(ctx context.Context, token string) (dispatch.JobQueue, *dispatch.HeldJob, error) {
	q, j, err := s.JobSource.Next(ctx, token)
	if j != nil {
		s.mu.Lock()
		if s.takes++; s.takes > 1 {
			s.clock.Add(s.step)
		}
		s.mu.Unlock()
	}
	return q, j, err
}

// clockedHost is a fake host whose worker and queue read clock, the queue
// only while jobs are added (its delays then run on the real clock).
func clockedHost(t *testing.T) (*fakeHost, *testClock) {
	h := newFakeHost(t)
	clock := &testClock{now: time.Now().UTC().Truncate(time.Millisecond)}
	h.tune.Now = clock.Now
	return h, clock
}

func (h *fakeHost) addAt(t *testing.T, clock *testClock, j dispatchtest.Job) {
	t.Helper()
	h.queue.Now = clock.Now
	defer func() { h.queue.Now = nil }()
	if !h.queue.Add(j) {
		t.Fatalf("job %s already added", j.ID)
	}
}

// triggerWorkspaces serves GitHub and admits the jobs of one trigger, with
// empty workspaces that publish nothing.
type triggerWorkspaces struct{ trigger string }

func (triggerWorkspaces) Prepare(context.Context, string, jobs.Job, string) (dispatch.Workspace, error) {
	return emptyWorkspace{}, nil
}
func (triggerWorkspaces) Serves(f jobs.Forge) bool { return f == jobs.ForgeGitHub }
func (w triggerWorkspaces) Admit(j jobs.Job) error {
	if j.Trigger != w.trigger {
		return errors.New("no such trigger")
	}
	return nil
}
func (triggerWorkspaces) Status(context.Context, string, jobs.Job, dispatch.JobStatus) (string, error) {
	return "", nil
}

type emptyWorkspace struct{}

func (emptyWorkspace) Event() *jobs.Event { return nil }
func (emptyWorkspace) Publish(context.Context, dispatch.WorkspaceResult) (dispatch.WorkspacePublished, error) {
	return dispatch.WorkspacePublished{}, nil
}
func (emptyWorkspace) Close() error { return nil }

// A forge job's record names the trigger of this host's that admitted it; a
// cron run's the cron entry this host agreed to, when it is a name.
func TestRecordTrigger(t *testing.T) {
	h := newFakeHost(t)
	h.deps.Cron = dispatchtest.CronGate{Verdict: dispatch.CronVerdict{Run: true}}
	h.deps.Workspaces = triggerWorkspaces{trigger: "fix-on-label"}
	h.start(t)
	h.add(t, "forge-1", `{"kind":"forge","forge":"github","repo":"acme/widgets","number":3,"flow":"fix","task":"t","trigger":"fix-on-label"}`, 1)
	h.queue.Add(dispatchtest.Job{ID: "cron-1", Data: []byte(fmt.Sprintf(`{"kind":"cron","folder":%q,"flow":"fix","task":"t"}`, t.TempDir())), SchedulerID: "nightly"})
	h.queue.Add(dispatchtest.Job{ID: "cron-2", Data: []byte(fmt.Sprintf(`{"kind":"cron","folder":%q,"flow":"fix","task":"t"}`, t.TempDir())), SchedulerID: "nightly@host-a"})
	h.add(t, "local-1", fmt.Sprintf(`{"kind":"local","folder":%q,"flow":"fix","task":"t"}`, t.TempDir()), 1)
	for id, want := range map[string]string{"forge-1": "fix-on-label", "cron-1": "nightly", "cron-2": "", "local-1": ""} {
		h.wait(t, id, finished)
		if rec := h.oneRecord(t, id, jobs.OutcomeCompleted, jobs.ReasonCompleted); rec.Trigger != want {
			t.Errorf("%s: trigger %q, want %q", id, rec.Trigger, want)
		}
	}
}

// The record says when the job was queued, how long it waited for its
// pickup, how long its container ran and what the container used, as the
// runtime measured it.
func TestRecordTimingsAndContainer(t *testing.T) {
	h, clock := clockedHost(t)
	enqueued := clock.Now()
	h.addAt(t, clock, dispatchtest.Job{ID: "run-1", Data: []byte(forgeJob)})
	clock.Add(90 * time.Second)
	start := clock.Now()
	h.rt.Results = map[string]dispatchtest.RunResult{"run-1": {Result: container.Result{
		StartedAt: start, EndedAt: start.Add(42 * time.Second), PeakMemoryBytes: 64 << 20, CPUTime: 1500 * time.Millisecond, OOMKilled: true, ExitCode: 137,
	}}}
	h.start(t)
	h.wait(t, "run-1", finished)
	rec := h.records(t, "run-1")[0]
	tm, c := rec.Timings, rec.Container
	if tm == nil || !tm.EnqueuedAt.Equal(enqueued) || tm.QueuedMs != 90_000 || tm.AgentMs != 42_000 || tm.SetupMs != 0 || len(tm.GatesMs) != 0 {
		t.Fatalf("timings %+v, want enqueued at %s, 90000 ms queued, 42000 ms in the agent", tm, enqueued)
	}
	if c == nil || *c != (jobs.ContainerStats{PeakMemoryBytes: 64 << 20, CPUMillis: 1500, OOMKilled: true}) {
		t.Fatalf("container %+v", c)
	}
}

// A job refused before it ran has timings but no container.
func TestRecordRefusedHasNoContainer(t *testing.T) {
	h, clock := clockedHost(t)
	h.addAt(t, clock, dispatchtest.Job{ID: "bad-1", Data: []byte(`{"kind":"forge"}`)})
	clock.Add(time.Second)
	h.start(t)
	h.wait(t, "bad-1", finished)
	rec := h.oneRecord(t, "bad-1", jobs.OutcomePolicy, jobs.ReasonInvalidJob)
	if rec.Container != nil || rec.Timings == nil || rec.Timings.QueuedMs != 1000 || rec.Timings.AgentMs != 0 {
		t.Fatalf("container %+v, timings %+v", rec.Container, rec.Timings)
	}
}

// A job deferred by a gate, then run at a later pickup, is recorded with
// the wait in that gate: the deferral's note carries it to the next take.
func TestRecordGateWaits(t *testing.T) {
	h, clock := clockedHost(t)
	h.tune.BusyDeferral = 10 * time.Millisecond
	var mu sync.Mutex
	calls := 0
	h.deps.Cron = dispatchtest.CronGate{Func: func(string, string) dispatch.CronVerdict {
		mu.Lock()
		defer mu.Unlock()
		calls++
		return dispatch.CronVerdict{Run: calls > 2, Leave: calls <= 2}
	}}
	h.deps.Source = &movingSource{JobSource: h.deps.Source, clock: clock, step: 7 * time.Second}
	h.addAt(t, clock, dispatchtest.Job{ID: "cron-1", Data: []byte(forgeJob), SchedulerID: "nightly"})
	h.start(t)
	h.wait(t, "cron-1", finished)
	rec := h.oneRecord(t, "cron-1", jobs.OutcomeCompleted, jobs.ReasonCompleted)
	if tm := rec.Timings; tm == nil || tm.GatesMs[jobs.ReasonCronNotAgreed] != 14_000 || len(tm.GatesMs) != 1 || tm.QueuedMs != 14_000 {
		t.Fatalf("timings %+v, want 14000 ms waited in cron-not-agreed", rec.Timings)
	}
}

// Anyone who writes Valkey can write a job's note. A note that claims waits
// longer than the job has existed, names a gate with free text, or is not
// a note at all is dropped whole; another attempt's is not this one's.
func TestRecordGateWaitsNoteIsChecked(t *testing.T) {
	for name, note := range map[string]string{
		"longer than the job": `{"a":1,"w":{"scope-busy":99999999999},"r":"scope-busy","at":0}`,
		"sum too long":        `{"a":1,"w":{"scope-busy":4000,"pause-window":4000},"r":"scope-busy","at":0}`,
		"free text":           `{"a":1,"w":{"<b>you owe $9</b>":10},"r":"scope-busy","at":0}`,
		"bidi":                "{\"a\":1,\"w\":{\"scope\u202ebusy\":10},\"r\":\"scope-busy\",\"at\":0}",
		"negative":            `{"a":1,"w":{"scope-busy":-5},"r":"scope-busy","at":0}`,
		"unknown field":       `{"a":1,"w":{"scope-busy":10},"r":"scope-busy","at":0,"x":1}`,
		"another attempt":     `{"a":7,"w":{"scope-busy":10},"r":"scope-busy","at":0}`,
		"not json":            `scope-busy=10`,
	} {
		t.Run(name, func(t *testing.T) {
			h, clock := clockedHost(t)
			h.addAt(t, clock, dispatchtest.Job{ID: "j-1", Data: []byte(forgeJob), GateWaits: note})
			clock.Add(5 * time.Second)
			h.start(t)
			h.wait(t, "j-1", finished)
			rec := h.oneRecord(t, "j-1", jobs.OutcomeCompleted, jobs.ReasonCompleted)
			if rec.Timings == nil || len(rec.Timings.GatesMs) != 0 {
				t.Fatalf("a written note reached the record: %+v", rec.Timings)
			}
		})
	}
	// A note that holds up is taken, its running deferral ended at the pickup.
	h, clock := clockedHost(t)
	at := clock.Now().Add(2 * time.Second).UnixMilli()
	h.addAt(t, clock, dispatchtest.Job{ID: "j-2", Data: []byte(forgeJob), GateWaits: fmt.Sprintf(`{"a":1,"w":{"pause-window":1000},"r":"scope-busy","at":%d}`, at)})
	clock.Add(5 * time.Second)
	h.start(t)
	h.wait(t, "j-2", finished)
	rec := h.oneRecord(t, "j-2", jobs.OutcomeCompleted, jobs.ReasonCompleted)
	if g := rec.Timings.GatesMs; len(g) != 2 || g["pause-window"] != 1000 || g[jobs.ReasonScopeBusy] != 3000 {
		t.Fatalf("gates %+v", g)
	}
}
