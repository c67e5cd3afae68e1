package metrics

import (
	"testing"
	"time"

	"github.com/pidispatch/pidispatch/dispatch"
)

// BenchmarkObserve is the cost of one event of each hot kind, from several
// goroutines at once as the Worker calls it.
func BenchmarkObserve(b *testing.B) {
	m := New("h1")
	events := []dispatch.Event{
		{Kind: dispatch.EventStart, PickupLatency: 3 * time.Millisecond},
		{Kind: dispatch.EventFinish, Outcome: "completed", Reason: "completed", Duration: time.Second, SpendMicros: 1200, Tokens: 300, Calls: 2},
		{Kind: dispatch.EventGate, Gate: "budget", Decision: dispatch.DecisionDefer},
		{Kind: dispatch.EventBeat, Up: true},
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			m.Observe(events[i%len(events)])
			i++
		}
	})
}
