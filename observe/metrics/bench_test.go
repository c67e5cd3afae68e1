package metrics

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/jobs"
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

// BenchmarkScrape is the worker-side cost of one /metrics scrape, with the
// polled sources answering at once (their Valkey round trips are not in it).
func BenchmarkScrape(b *testing.B) {
	w := WindowReaderFunc(func(context.Context) ([]Window, error) { return []Window{{Name: "day", Used: 3, Cap: 25}}, nil })
	m := New("h1", WithSources(Sources{
		Queues: QueueCounterFunc(func(context.Context) ([]QueueCounts, error) {
			return []QueueCounts{{Queue: "pi-jobs", ByState: map[string]int64{"waiting": 1, "active": 2, "completed": 3}}}, nil
		}),
		Starts: w, Dollars: w,
	}))
	for _, r := range []jobs.Reason{"completed", "exit-1", "invalid-job", "secret-profile-unknown"} {
		m.Observe(dispatch.Event{Kind: dispatch.EventFinish, Outcome: "completed", Reason: r, Duration: time.Second})
	}
	h := Handler(m, nil)
	req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	b.ReportAllocs()
	for b.Loop() {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			b.Fatal(rec.Code)
		}
	}
}
