package dispatchtest

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/jobs"
)

// Cluster is n Workers on one fake Fleet, as MakeFleet builds them: each
// host has its own config, runtime and run records, and every store is the
// fleet's, so what one host holds (a start, a dollar reservation, a lease,
// a hold, a record claim) the others see.
type Cluster struct {
	Fleet *Fleet
	Hosts []*Host
}

// Host is one Worker of a Cluster. Change Config, Tuning and Deps before
// Start; Deps holds the stores the fleet opened for the host.
type Host struct {
	Name    string
	Config  dispatch.Config
	Tuning  dispatch.Tuning
	Deps    dispatch.Deps
	Runtime *Runtime

	mu   sync.Mutex
	stop func() error
}

// MakeFleet returns n hosts, host-1 to host-n, each with a declared name,
// on one fresh fake Fleet, not yet started. Each host's runtime is a fresh
// fake whose containers exit 0; its clock is the fleet's; it logs nothing.
// The hosts hold no fleet key and take unsigned jobs on every queue
// (Config.UnsignedQueues); a test of the signature gate changes that.
// The hosts that are started are stopped when the test ends.
func MakeFleet(t *testing.T, n int) *Cluster {
	t.Helper()
	f := NewFleet()
	c := &Cluster{Fleet: f}
	for i := 1; i <= n; i++ {
		name := fmt.Sprintf("host-%d", i)
		cfg := dispatch.DefaultConfig()
		cfg.WorkerName, cfg.WorkerNameDeclared = name, true
		cfg.LogsDir = filepath.Join(t.TempDir(), "runs")
		cfg.JobImage = "pi-agent:test"
		cfg.Concurrency = 2
		cfg.UnsignedQueues = []string{fleet.EveryQueue}
		h := &Host{
			Name:   name,
			Config: cfg,
			Tuning: dispatch.Tuning{
				JobsDir:         t.TempDir(),
				StalledInterval: time.Hour,
				RehomeInterval:  time.Hour,
				ShutdownGrace:   5 * time.Second,
				Now:             f.Clock.Now,
				Logger:          slog.New(slog.DiscardHandler),
			},
			Runtime: NewRuntime(),
		}
		h.Deps = dispatch.Deps{Stores: Open(t, f, dispatch.FleetHost{Name: name, Declared: true}), Runtime: h.Runtime}
		c.Hosts = append(c.Hosts, h)
	}
	return c
}

// Start starts every host.
func (c *Cluster) Start(t *testing.T) {
	t.Helper()
	for _, h := range c.Hosts {
		h.Start(t)
	}
}

// Records returns job id's run records on every host.
func (c *Cluster) Records(t *testing.T, id string) []jobs.Record {
	t.Helper()
	var recs []jobs.Record
	for _, h := range c.Hosts {
		recs = append(recs, h.Records(t, id)...)
	}
	return recs
}

// Specs returns the containers every host started.
func (c *Cluster) Specs() int {
	n := 0
	for _, h := range c.Hosts {
		n += len(h.Runtime.Specs())
	}
	return n
}

// Start builds the host's Worker and runs it until Stop or the end of the
// test. A lock TTL set in Tuning is the TTL of the host's queues' locks.
func (h *Host) Start(t *testing.T) {
	t.Helper()
	if ttl := h.Tuning.LockTTL; ttl > 0 {
		for _, jq := range h.Deps.Queues {
			if q, ok := jq.(*Queue); ok {
				q.mu.Lock()
				q.LockTTL = ttl
				q.mu.Unlock()
			}
		}
	}
	w, err := dispatch.NewWorker(h.Config, h.Deps, h.Tuning)
	if err != nil {
		t.Fatalf("NewWorker of %s: %v", h.Name, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	var once sync.Once
	var runErr error
	stop := func() error {
		once.Do(func() {
			cancel()
			select {
			case runErr = <-done:
			case <-time.After(20 * time.Second):
				runErr = fmt.Errorf("%s did not stop within 20s", h.Name)
			}
		})
		return runErr
	}
	h.mu.Lock()
	h.stop = stop
	h.mu.Unlock()
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("Run of %s: %v", h.Name, err)
		}
	})
}

// Stop stops the host's Worker and returns what its Run returned; nil when
// it was never started.
func (h *Host) Stop() error {
	h.mu.Lock()
	stop := h.stop
	h.mu.Unlock()
	if stop == nil {
		return nil
	}
	return stop()
}

// Records returns job id's run records on this host.
func (h *Host) Records(t *testing.T, id string) []jobs.Record {
	t.Helper()
	recs, err := jobs.ReadRecords(h.Config.LogsDir, id)
	if err != nil && !os.IsNotExist(err) {
		t.Fatalf("records of %s on %s: %v", id, h.Name, err)
	}
	return recs
}
