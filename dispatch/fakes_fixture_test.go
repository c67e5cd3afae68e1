package dispatch_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/dispatch/dispatchtest"
	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/gateway/socket"
	"github.com/pidispatch/pidispatch/internal/secretprofile"
	"github.com/pidispatch/pidispatch/jobs"
)

// modelSockets opens the real model sockets, as the stack wires them.
type modelSockets struct{}

func (modelSockets) Open(h http.Handler, user string, conns int, log *slog.Logger) (dispatch.ModelSocket, error) {
	s, err := socket.Open(h, user, conns, log)
	if err != nil {
		return nil, err
	}
	return s, nil
}

// fakeHost is a Worker booted on the fakes of package dispatchtest: no
// Valkey, no Docker. Tests change cfg, tune and deps before start.
type fakeHost struct {
	cfg     dispatch.Config
	tune    dispatch.Tuning
	deps    dispatch.Deps
	queue   *dispatchtest.Queue
	rt      *dispatchtest.Runtime
	budget  *dispatchtest.Budget
	mirror  *dispatchtest.Mirror
	holds   *dispatchtest.Holds
	cancels *dispatchtest.Cancels
	leases  *dispatchtest.LeaseStore

	stop func() error
}

func newFakeHost(t *testing.T) *fakeHost {
	t.Helper()
	cfg := dispatch.DefaultConfig()
	cfg.WorkerName = "host-a"
	cfg.LogsDir = filepath.Join(t.TempDir(), "runs")
	cfg.Concurrency = 2
	cfg.JobImage = "pi-agent:test"
	// Folder jobs work in the tests' temporary folders, owned by whoever
	// runs the tests (root in a container).
	cfg.FolderRoots = []string{os.TempDir()}
	cfg.ContainerUserExplicit = true
	// The fake queue's jobs carry no signature: this host takes them (the
	// signature gate's own tests clear this).
	cfg.UnsignedQueues = []string{fleet.EveryQueue}
	h := &fakeHost{
		cfg: cfg,
		tune: dispatch.Tuning{
			JobsDir:         t.TempDir(),
			StalledInterval: time.Hour,
			RehomeInterval:  time.Hour,
			ShutdownGrace:   5 * time.Second,
			Logger:          slog.New(slog.NewTextHandler(io.Discard, nil)),
		},
		queue:   dispatchtest.NewQueue(fleet.SharedQueue),
		rt:      dispatchtest.NewRuntime(),
		budget:  dispatchtest.NewBudget(100, 0),
		mirror:  dispatchtest.NewMirror(),
		holds:   dispatchtest.NewHolds(),
		cancels: dispatchtest.NewCancels(),
		leases:  dispatchtest.NewLeaseStore(),
	}
	h.queue.WorkerName = cfg.WorkerName
	h.deps = dispatch.Deps{Stores: dispatch.Stores{
		Queues:  []dispatch.JobQueue{h.queue},
		Source:  dispatchtest.NewSource(h.queue),
		Budget:  h.budget,
		Mirror:  h.mirror,
		Holds:   h.holds,
		Cancels: h.cancels,
		Leases:  h.leases.Leaser(cfg.WorkerName),
	}, Runtime: h.rt, Secrets: secretprofile.Resolver{}, ModelSockets: modelSockets{}}
	return h
}

// start boots the worker; it is stopped when the test ends, if not before.
func (h *fakeHost) start(t *testing.T) {
	t.Helper()
	if h.tune.LockTTL > 0 {
		h.queue.LockTTL = h.tune.LockTTL
	}
	w, err := dispatch.NewWorker(h.cfg, h.deps, h.tune)
	if err != nil {
		t.Fatalf("NewWorker: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	var once sync.Once
	var runErr error
	h.stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case runErr = <-done:
			case <-time.After(20 * time.Second):
				t.Error("worker did not stop")
			}
		})
		return runErr
	}
	t.Cleanup(func() {
		if err := h.stop(); err != nil {
			t.Errorf("Run: %v", err)
		}
	})
}

// add puts a job on the queue.
func (h *fakeHost) add(t *testing.T, id string, data string, attempts int) {
	t.Helper()
	if !h.queue.Add(dispatchtest.Job{ID: id, Data: json.RawMessage(data), Attempts: attempts}) {
		t.Fatalf("job %s already added", id)
	}
}

// wait blocks until cond holds for job id.
func (h *fakeHost) wait(t *testing.T, id string, cond func(dispatchtest.Snapshot) bool) dispatchtest.Snapshot {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	s, err := h.queue.WaitFor(ctx, id, cond)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func finished(s dispatchtest.Snapshot) bool { return s.Finished() }

func deferred(s dispatchtest.Snapshot) bool { return s.Deferrals > 0 }

// records reads job id's run records.
func (h *fakeHost) records(t *testing.T, id string) []jobs.Record {
	t.Helper()
	recs, err := jobs.ReadRecords(h.cfg.LogsDir, id)
	if err != nil && !os.IsNotExist(err) {
		t.Fatalf("records of %s: %v", id, err)
	}
	return recs
}

// oneRecord asserts job id has exactly one record, with outcome and reason.
func (h *fakeHost) oneRecord(t *testing.T, id, outcome string, reason jobs.Reason) jobs.Record {
	t.Helper()
	recs := h.records(t, id)
	if len(recs) != 1 || recs[0].Outcome != outcome || recs[0].Reason != reason {
		t.Fatalf("records of %s = %+v, want one %s/%s", id, recs, outcome, reason)
	}
	return recs[0]
}

// resultReason is the reason in a policy result the queue got.
func resultReason(t *testing.T, s dispatchtest.Snapshot) jobs.Reason {
	t.Helper()
	var r struct {
		Outcome string
		Reason  jobs.Reason
	}
	if err := json.Unmarshal(s.Result, &r); err != nil {
		t.Fatalf("result %s: %v", s.Result, err)
	}
	return r.Reason
}

// writeFile writes a file in a temporary folder and returns its path.
func writeFile(t *testing.T, name, body string, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(body), mode); err != nil {
		t.Fatal(err)
	}
	return p
}

const forgeJob = `{"kind":"forge","repo":"acme/widgets","flow":"fix","task":"t"}`

// eventually waits until cond holds: what the worker does after reporting
// to the queue (releasing a slot or a reservation) lands a moment later.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not so after 10s: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// todayAt is today (UTC) at hh:00, so records stay within retention.
func todayAt(hh int) time.Time {
	return time.Now().UTC().Truncate(24 * time.Hour).Add(time.Duration(hh) * time.Hour)
}
