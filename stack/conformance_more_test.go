package stack

import (
	"context"
	"testing"
	"time"

	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/dispatchtest"
	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/internal/livetest"
	"github.com/pidispatch/pidispatch/queue"
	"github.com/pidispatch/pidispatch/registry"
)

func TestConformanceJobSource(t *testing.T) {
	dispatchtest.TestJobSource(t, func(t *testing.T) dispatchtest.SourceHarness {
		db := livetest.Valkey(t)
		q, err := queue.New(db.Client, fleet.SharedQueue, queue.Config{})
		if err != nil {
			t.Fatal(err)
		}
		c, err := queue.NewConsumer([]*queue.Queue{q}, queue.ConsumerConfig{BlockTimeout: 200 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return dispatchtest.SourceHarness{Source: Source(c), Add: func(id string) {
			if _, _, err := q.Add(context.Background(), "job", []byte(`{}`), queue.AddOptions{JobID: id}); err != nil {
				t.Fatal(err)
			}
		}}
	})
}

func TestConformanceRegistry(t *testing.T) {
	dispatchtest.TestRegistry(t, func(t *testing.T) dispatchtest.RegistryHarness {
		db := livetest.Valkey(t)
		return dispatchtest.RegistryHarness{New: func(name, machine string) dispatch.Registry {
			r, err := registry.New(db.Client, name, registry.Facts{}, registry.Config{Machine: machine})
			if err != nil {
				t.Fatal(err)
			}
			return Registry(r)
		}}
	})
}
