package logtest_test

import (
	"sync"
	"testing"

	"github.com/pidispatch/pidispatch/internal/testkit/logtest"
)

func TestBufferCountsEventsFromManyWriters(t *testing.T) {
	var b logtest.Buffer
	log := b.Logger().With("host", "alpha")
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 10 {
				log.Info("tick")
				log.Debug("tock")
			}
		}()
	}
	wg.Wait()
	if n := b.Count(t, "tick"); n != 80 {
		t.Fatalf("tick = %d, want 80", n)
	}
	if n := b.Count(t, "tock"); n != 80 {
		t.Fatalf("tock (debug) = %d, want 80", n)
	}
	if got := b.WaitEvents(t, "tick", 80); len(got) != 80 {
		t.Fatalf("WaitEvents = %d lines", len(got))
	}
	b.EveryLineHasHost(t, "alpha")
	if len(b.Lines(t)) != 160 {
		t.Fatalf("lines = %d", len(b.Lines(t)))
	}
}
