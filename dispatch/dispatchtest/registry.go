package dispatchtest

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"

	"github.com/pidispatch/pidispatch/capabilities"
	"github.com/pidispatch/pidispatch/dispatch"
)

// Registry is an in-memory dispatch.Registry: Start fails with
// ErrNameInUse when Live already lists a host of this name, and the calls
// are counted for assertions.
type Registry struct {
	// Name is this host's name.
	Name string

	mu        sync.Mutex
	live      []capabilities.Host
	started   bool
	closed    bool
	publishes int
	// Err, when set, fails Start (degraded boot), Publish and ReadLive.
	Err error
}

var _ dispatch.Registry = (*Registry)(nil)

// NewRegistry returns the registry of host name with the given other live
// hosts.
func NewRegistry(name string, live ...capabilities.Host) *Registry {
	return &Registry{Name: name, live: live}
}

// Start joins the registry.
func (r *Registry) Start(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, h := range r.live {
		if h.Name == r.Name {
			return fmt.Errorf("host %s: %w", r.Name, dispatch.ErrNameInUse)
		}
	}
	if r.Err != nil {
		return r.Err
	}
	r.started = true
	return nil
}

// Publish counts a row refresh.
func (r *Registry) Publish(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.publishes++
	return r.Err
}

// ReadLive returns the live hosts (this one included once started).
func (r *Registry) ReadLive(ctx context.Context) ([]capabilities.Host, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.Err != nil {
		return nil, r.Err
	}
	out := slices.Clone(r.live)
	if r.started && !r.closed {
		out = append(out, capabilities.Host{Name: r.Name})
	}
	return out, nil
}

// SetLive replaces the other live hosts.
func (r *Registry) SetLive(hosts ...capabilities.Host) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.live = hosts
}

// Close leaves the registry.
func (r *Registry) Close(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = true
	return nil
}

// State reports whether Start succeeded and whether Close was called.
func (r *Registry) State() (started, closed bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.started, r.closed
}

// CronGate is a dispatch.CronGate answering every run with Verdict, or with
// Func when set.
type CronGate struct {
	Verdict dispatch.CronVerdict
	Func    func(queue, schedulerID string) dispatch.CronVerdict
}

var _ dispatch.CronGate = CronGate{}

// AdmitCron judges one run.
func (g CronGate) AdmitCron(ctx context.Context, queue, schedulerID string, data json.RawMessage) dispatch.CronVerdict {
	if g.Func != nil {
		return g.Func(queue, schedulerID)
	}
	return g.Verdict
}
