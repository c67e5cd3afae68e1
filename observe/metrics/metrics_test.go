package metrics

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/pidispatch/pidispatch/dispatch"
)

func TestMetricsFinishedByReason(t *testing.T) {
	m := New("h1")
	m.Observe(dispatch.Event{Kind: dispatch.EventFinish, Outcome: "completed", Reason: "completed", Duration: 3 * time.Second})
	m.Observe(dispatch.Event{Kind: dispatch.EventFinish, Outcome: "completed", Reason: "completed", Duration: 40 * time.Second})
	m.Observe(dispatch.Event{Kind: dispatch.EventFinish, Outcome: "policy", Reason: "secret-profile-unknown"})
	m.Observe(dispatch.Event{Kind: dispatch.EventFinish, Outcome: "failed", Reason: "exit-1", Duration: time.Second,
		SpendMicros: 1_250_000, Tokens: 900, Calls: 3})

	want := `
# HELP pidispatch_jobs_finished_total Runs ended and recorded, by record outcome and reason.
# TYPE pidispatch_jobs_finished_total counter
pidispatch_jobs_finished_total{host="h1",outcome="completed",reason="completed"} 2
pidispatch_jobs_finished_total{host="h1",outcome="failed",reason="exit-1"} 1
pidispatch_jobs_finished_total{host="h1",outcome="policy",reason="secret-profile-unknown"} 1
`
	if err := testutil.GatherAndCompare(m.Registry(), strings.NewReader(want), "pidispatch_jobs_finished_total"); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(m.spend); got != 1.25 {
		t.Fatalf("spend = %v, want 1.25", got)
	}
	if got := testutil.ToFloat64(m.tokens); got != 900 {
		t.Fatalf("tokens = %v, want 900", got)
	}
	if got := testutil.ToFloat64(m.calls); got != 3 {
		t.Fatalf("calls = %v, want 3", got)
	}
	// A refusal ran no container: it is counted, not timed.
	h := histogram(t, m, "pidispatch_job_duration_seconds", "outcome", "completed")
	if h.GetSampleCount() != 2 || h.GetSampleSum() != 43 {
		t.Fatalf("completed durations: count %d sum %v, want 2 and 43", h.GetSampleCount(), h.GetSampleSum())
	}
	if p := histogram(t, m, "pidispatch_job_duration_seconds", "outcome", "policy"); p.GetSampleCount() != 0 {
		t.Fatalf("policy durations: count %d, want 0", p.GetSampleCount())
	}
}

func TestMetricsGateDecisions(t *testing.T) {
	m := New("h1")
	m.Observe(dispatch.Event{Kind: dispatch.EventGate, Gate: "secret-profile", Decision: dispatch.DecisionRefuse, Reason: "secret-profile-unknown"})
	m.Observe(dispatch.Event{Kind: dispatch.EventGate, Gate: "budget", Decision: dispatch.DecisionDefer, Reason: "daily cap reached", Delay: time.Hour})
	m.Observe(dispatch.Event{Kind: dispatch.EventGate, Gate: "budget", Decision: dispatch.DecisionDefer})
	m.Observe(dispatch.Event{Kind: dispatch.EventGate, Gate: "job-data", Decision: dispatch.DecisionFail, Reason: "invalid-job"})
	want := `
# HELP pidispatch_gate_decisions_total Jobs a gate stopped, by gate and decision (defer, refuse, fail).
# TYPE pidispatch_gate_decisions_total counter
pidispatch_gate_decisions_total{decision="defer",gate="budget",host="h1"} 2
pidispatch_gate_decisions_total{decision="fail",gate="job-data",host="h1"} 1
pidispatch_gate_decisions_total{decision="refuse",gate="secret-profile",host="h1"} 1
`
	if err := testutil.GatherAndCompare(m.Registry(), strings.NewReader(want), "pidispatch_gate_decisions_total"); err != nil {
		t.Fatal(err)
	}
}

func TestMetricsStartsAndServices(t *testing.T) {
	m := New("h1")
	m.Observe(dispatch.Event{Kind: dispatch.EventStart, PickupLatency: 20 * time.Millisecond})
	m.Observe(dispatch.Event{Kind: dispatch.EventStart, PickupLatency: 2 * time.Second})
	m.Observe(dispatch.Event{Kind: dispatch.EventLockLost})
	m.Observe(dispatch.Event{Kind: dispatch.EventStalled, Count: 3})
	m.Observe(dispatch.Event{Kind: dispatch.EventReach, Service: "valkey", Up: true})
	m.Observe(dispatch.Event{Kind: dispatch.EventReach, Service: "docker", Up: true})
	m.Observe(dispatch.Event{Kind: dispatch.EventReach, Service: "docker", Up: false})
	m.Observe(dispatch.Event{Kind: dispatch.EventBeat, Up: true})
	m.Observe(dispatch.Event{Kind: dispatch.EventBeat, Up: true})
	m.Observe(dispatch.Event{Kind: dispatch.EventBeat, Up: false})

	for name, c := range map[string]struct {
		got  prometheus.Collector
		want float64
	}{
		"started": {m.started, 2}, "lock lost": {m.lockLost, 1}, "stalled": {m.stalled, 3},
		"beats ok": {m.beatOK, 2}, "beats failed": {m.beatFail, 1},
	} {
		if got := testutil.ToFloat64(c.got); got != c.want {
			t.Errorf("%s = %v, want %v", name, got, c.want)
		}
	}
	p := histogram(t, m, "pidispatch_pickup_to_start_seconds")
	if p.GetSampleCount() != 2 || p.GetSampleSum() != 2.02 {
		t.Fatalf("pickup: count %d sum %v, want 2 and 2.02", p.GetSampleCount(), p.GetSampleSum())
	}
	want := `
# HELP pidispatch_service_up Whether a service the worker depends on answered at its last use (1) or not (0).
# TYPE pidispatch_service_up gauge
pidispatch_service_up{host="h1",service="docker"} 0
pidispatch_service_up{host="h1",service="valkey"} 1
`
	if err := testutil.GatherAndCompare(m.Registry(), strings.NewReader(want), "pidispatch_service_up"); err != nil {
		t.Fatal(err)
	}
}

// Label values an event carries never grow a vector without bound, and a
// value not shaped like a name (free text, a job id with odd characters)
// becomes "other".
func TestMetricsLabelsBounded(t *testing.T) {
	m := New("h1")
	m.Observe(dispatch.Event{Kind: dispatch.EventFinish, Outcome: "policy", Reason: "Some Free Text: with spaces"})
	for i := range 2 * maxLabelValues {
		m.Observe(dispatch.Event{Kind: dispatch.EventGate, Gate: "g" + string(rune('a'+i%26)) + strings.Repeat("x", i/26), Decision: "defer"})
	}
	if n := testutil.CollectAndCount(m.gates.counters); n > maxLabelValues+1 {
		t.Fatalf("gate series = %d, want at most %d", n, maxLabelValues+1)
	}
	if got := testutil.ToFloat64(m.finished.counters.WithLabelValues("policy", other)); got != 1 {
		t.Fatalf("free-text reason counted under other = %v, want 1", got)
	}
	if got := testutil.ToFloat64(m.gates.counters.WithLabelValues(other, other)); got != maxLabelValues {
		t.Fatalf("gates past the bound = %v, want %d", got, maxLabelValues)
	}
}

// Observe is called from many goroutines at once (go test -race).
func TestMetricsObserveConcurrent(t *testing.T) {
	m := New("h1")
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 500 {
				m.Observe(dispatch.Event{Kind: dispatch.EventFinish, Outcome: "completed", Reason: "completed", Duration: time.Second})
				m.Observe(dispatch.Event{Kind: dispatch.EventGate, Gate: "budget", Decision: "defer"})
			}
		})
	}
	wg.Wait()
	if got := testutil.ToFloat64(m.finished.counters.WithLabelValues("completed", "completed")); got != 4000 {
		t.Fatalf("finished = %v, want 4000", got)
	}
}

func TestMetricsPolledSources(t *testing.T) {
	m := New("h1", WithSources(Sources{
		Queues: QueueCounterFunc(func(context.Context) ([]QueueCounts, error) {
			return []QueueCounts{{Queue: "pi-jobs", ByState: map[string]int64{"waiting": 4, "active": 1}}}, nil
		}),
		Held: HeldCounterFunc(func(context.Context) (int, error) { return 2, nil }),
		Starts: WindowReaderFunc(func(context.Context) ([]Window, error) {
			return []Window{{Name: "day", Used: 7, Cap: 25}, {Name: "week", Used: 9}}, nil
		}),
		Dollars: WindowReaderFunc(func(context.Context) ([]Window, error) {
			return nil, errors.New("valkey down")
		}),
	}))
	want := `
# HELP pidispatch_container_starts Container starts counted in the current budget window.
# TYPE pidispatch_container_starts gauge
pidispatch_container_starts{host="h1",window="day"} 7
pidispatch_container_starts{host="h1",window="week"} 9
# HELP pidispatch_container_starts_cap Cap of container starts of a budget window.
# TYPE pidispatch_container_starts_cap gauge
pidispatch_container_starts_cap{host="h1",window="day"} 25
# HELP pidispatch_held_jobs Jobs held on their waitFor conditions, fleet-wide.
# TYPE pidispatch_held_jobs gauge
pidispatch_held_jobs{host="h1"} 2
# HELP pidispatch_queue_jobs Jobs on this host's queues, by queue and state.
# TYPE pidispatch_queue_jobs gauge
pidispatch_queue_jobs{host="h1",queue="pi-jobs",state="active"} 1
pidispatch_queue_jobs{host="h1",queue="pi-jobs",state="waiting"} 4
# HELP pidispatch_scrape_source_up Whether a polled source answered within the scrape timeout (1) or not (0).
# TYPE pidispatch_scrape_source_up gauge
pidispatch_scrape_source_up{host="h1",source="dollars"} 0
pidispatch_scrape_source_up{host="h1",source="held"} 1
pidispatch_scrape_source_up{host="h1",source="queues"} 1
pidispatch_scrape_source_up{host="h1",source="starts"} 1
`
	names := []string{"pidispatch_container_starts", "pidispatch_container_starts_cap", "pidispatch_held_jobs",
		"pidispatch_queue_jobs", "pidispatch_scrape_source_up", "pidispatch_spend_used_dollars"}
	if err := testutil.GatherAndCompare(m.Registry(), strings.NewReader(want), names...); err != nil {
		t.Fatal(err)
	}
}

// A source that does not answer in time costs the scrape the timeout, not
// more, and is reported down.
func TestMetricsPolledSourceTimeout(t *testing.T) {
	m := New("h1", WithScrapeTimeout(50*time.Millisecond), WithSources(Sources{
		Held: HeldCounterFunc(func(ctx context.Context) (int, error) {
			<-ctx.Done()
			return 0, ctx.Err()
		}),
		Dollars: WindowReaderFunc(func(context.Context) ([]Window, error) {
			return []Window{{Name: "month", Used: 12.5, Reserved: 2, Cap: 100}}, nil
		}),
	}))
	start := time.Now()
	want := `
# HELP pidispatch_spend_cap_dollars Dollar cap of a spend window.
# TYPE pidispatch_spend_cap_dollars gauge
pidispatch_spend_cap_dollars{host="h1",window="month"} 100
# HELP pidispatch_spend_reserved_dollars Dollars running jobs hold reserved in the current spend window.
# TYPE pidispatch_spend_reserved_dollars gauge
pidispatch_spend_reserved_dollars{host="h1",window="month"} 2
# HELP pidispatch_spend_used_dollars Dollars settled in the current spend window.
# TYPE pidispatch_spend_used_dollars gauge
pidispatch_spend_used_dollars{host="h1",window="month"} 12.5
# HELP pidispatch_scrape_source_up Whether a polled source answered within the scrape timeout (1) or not (0).
# TYPE pidispatch_scrape_source_up gauge
pidispatch_scrape_source_up{host="h1",source="dollars"} 1
pidispatch_scrape_source_up{host="h1",source="held"} 0
`
	names := []string{"pidispatch_spend_cap_dollars", "pidispatch_spend_reserved_dollars", "pidispatch_spend_used_dollars",
		"pidispatch_scrape_source_up", "pidispatch_held_jobs"}
	if err := testutil.GatherAndCompare(m.Registry(), strings.NewReader(want), names...); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 10*time.Second { // a hang-catching bound: the source never answers
		t.Fatalf("scrape took %v with a 50ms timeout", d)
	}
}

// Two Metrics never share a series: each has its own registry.
func TestMetricsOwnRegistry(t *testing.T) {
	a, b := New("a"), New("b")
	a.Observe(dispatch.Event{Kind: dispatch.EventStart})
	if got := testutil.ToFloat64(b.started); got != 0 {
		t.Fatalf("b counted a's start: %v", got)
	}
	if n, err := testutil.GatherAndCount(prometheus.DefaultGatherer, "pidispatch_jobs_started_total"); err != nil || n != 0 {
		t.Fatalf("default registry holds %d pidispatch series (err %v), want 0", n, err)
	}
}

// histogram returns the histogram series of name whose label pairs match.
func histogram(t *testing.T, m *Metrics, name string, labelPairs ...string) *dto.Histogram {
	t.Helper()
	mfs, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, s := range mf.GetMetric() {
			for i := 0; i+1 < len(labelPairs); i += 2 {
				if !hasLabel(s, labelPairs[i], labelPairs[i+1]) {
					continue next
				}
			}
			return s.GetHistogram()
		}
	}
	t.Fatalf("no %s series with %v", name, labelPairs)
	return nil
}

func hasLabel(s *dto.Metric, name, value string) bool {
	for _, l := range s.GetLabel() {
		if l.GetName() == name && l.GetValue() == value {
			return true
		}
	}
	return false
}
