package dispatchtest

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"

	"github.com/pidispatch/pidispatch/capabilities"
	"github.com/pidispatch/pidispatch/dispatch"
)

// RegistryHarness makes registry rows of one fleet: New(name, machine) is
// the registry of the host called name running on machine; two calls with
// different machines are two live hosts.
type RegistryHarness struct {
	New func(name, machine string) dispatch.Registry
}

type fakeFleet struct {
	mu      sync.Mutex
	members []*fleetRegistry
}

// fleetRegistry is a fake Registry whose other live hosts are its fleet's
// started, unclosed rows.
type fleetRegistry struct {
	*Registry
	fleet  *fakeFleet
	routes bool // the host drains a queue of its own
}

func (r *fleetRegistry) others() []capabilities.Host {
	r.fleet.mu.Lock()
	defer r.fleet.mu.Unlock()
	var hosts []capabilities.Host
	for _, m := range r.fleet.members {
		if started, closed := m.State(); m != r && started && !closed {
			hosts = append(hosts, capabilities.Host{Name: m.Name, Routes: m.routes})
		}
	}
	return hosts
}

func (r *fleetRegistry) Start(ctx context.Context) error {
	r.SetLive(r.others()...)
	return r.Registry.Start(ctx)
}

func (r *fleetRegistry) ReadLive(ctx context.Context) ([]capabilities.Host, error) {
	r.SetLive(r.others()...)
	return r.Registry.ReadLive(ctx)
}

// TestRegistry runs the Registry contract: a started host is live, a second
// live host cannot take its name, and Close removes the row.
func TestRegistry(t *testing.T, newRegistry func(t *testing.T) RegistryHarness) {
	for _, c := range []struct {
		name string
		run  func(*testing.T, RegistryHarness)
	}{
		{"StartedHostIsLive", registryStartLive},
		{"NameHeldByAnotherHostIsRefused", registryNameInUse},
		{"CloseRemovesTheRow", registryCloseRemoves},
	} {
		t.Run(c.name, func(t *testing.T) { c.run(t, newRegistry(t)) })
	}
}

func liveNames(t *testing.T, r dispatch.Registry) []string {
	t.Helper()
	hosts, err := r.ReadLive(qctx(t))
	if err != nil {
		t.Fatalf("ReadLive: %v", err)
	}
	var names []string
	for _, h := range hosts {
		names = append(names, h.Name)
	}
	slices.Sort(names)
	return names
}

func mustStart(t *testing.T, r dispatch.Registry) {
	t.Helper()
	if err := r.Start(qctx(t)); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { _ = r.Close(context.Background()) })
}

func registryStartLive(t *testing.T, h RegistryHarness) {
	a, b := h.New("alpha", "m1"), h.New("beta", "m2")
	mustStart(t, a)
	if got := liveNames(t, a); !slices.Equal(got, []string{"alpha"}) {
		t.Fatalf("ReadLive after alpha's Start = %v, want [alpha]", got)
	}
	mustStart(t, b)
	if got := liveNames(t, a); !slices.Equal(got, []string{"alpha", "beta"}) {
		t.Fatalf("ReadLive after both Start = %v, want [alpha beta]", got)
	}
}

func registryNameInUse(t *testing.T, h RegistryHarness) {
	a := h.New("alpha", "m1")
	mustStart(t, a)
	b := h.New("alpha", "m2")
	err := b.Start(qctx(t))
	t.Cleanup(func() { _ = b.Close(context.Background()) })
	if !errors.Is(err, dispatch.ErrNameInUse) {
		t.Fatalf("second Start of alpha on another machine: %v, want ErrNameInUse", err)
	}
	if got := liveNames(t, a); !slices.Equal(got, []string{"alpha"}) {
		t.Fatalf("ReadLive after the refused Start = %v, want [alpha] once", got)
	}
}

func registryCloseRemoves(t *testing.T, h RegistryHarness) {
	a, b := h.New("alpha", "m1"), h.New("beta", "m2")
	mustStart(t, a)
	mustStart(t, b)
	if err := a.Close(qctx(t)); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if got := liveNames(t, b); !slices.Equal(got, []string{"beta"}) {
		t.Fatalf("ReadLive after alpha's Close = %v, want [beta]", got)
	}
}
