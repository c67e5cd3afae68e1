package tracing_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/gateway"
	"github.com/pidispatch/pidispatch/jobs"
	"github.com/pidispatch/pidispatch/observe/tracing"
)

// otlpReceiver is a loopback OTLP/HTTP receiver that keeps the spans it is sent.
type otlpReceiver struct {
	mu    sync.Mutex
	spans []*tracepb.Span
}

func (r *otlpReceiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if req.URL.Path != "/v1/traces" {
		http.NotFound(w, req)
		return
	}
	b, _ := io.ReadAll(req.Body)
	var msg coltrace.ExportTraceServiceRequest
	if err := proto.Unmarshal(b, &msg); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	for _, rs := range msg.ResourceSpans {
		for _, ss := range rs.ScopeSpans {
			r.spans = append(r.spans, ss.Spans...)
		}
	}
	r.mu.Unlock()
	out, _ := proto.Marshal(&coltrace.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

// A job's start, model call and failure reach an OTLP receiver as the job
// span with its gates, container and model-call children.
func TestSpansReachOTLPReceiver(t *testing.T) {
	rcv := &otlpReceiver{}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := &http.Server{Handler: rcv, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://"+l.Addr().String())

	tr, err := tracing.NewOTLP(context.Background(), "host-1", "test")
	require.NoError(t, err)
	now := time.Now()
	base := dispatch.Event{Host: "host-1", JobID: "job-1", Queue: "pi-jobs", Attempt: 1}
	start := base
	start.Kind, start.At, start.PickupLatency = dispatch.EventStart, now, 40*time.Millisecond
	tr.Observe(start)
	tr.ModelCall(gateway.CallEvent{JobID: "job-1", Attempt: 1, Provider: "anthropic", Model: "claude-x", Status: 200,
		Start: now.Add(time.Millisecond), End: now.Add(5 * time.Millisecond), Usage: gateway.Usage{Input: 100, Output: 20}, Micros: 4321, Priced: true})
	fin := base
	fin.Kind, fin.At, fin.Outcome, fin.Reason, fin.SpendMicros = dispatch.EventFinish, now.Add(10*time.Millisecond), jobs.OutcomeFailed, jobs.ReasonExit1, 4321
	tr.Observe(fin)
	gate := base
	gate.JobID, gate.Kind, gate.At, gate.Gate, gate.Decision, gate.Reason = "job-2", dispatch.EventGate, now, "budget", dispatch.DecisionRefuse, jobs.ReasonOverBudget
	tr.Observe(gate)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, tr.Shutdown(ctx))

	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	byName := map[string]*tracepb.Span{}
	for _, s := range rcv.spans {
		byName[s.Name] = s
	}
	require.Len(t, byName, 5, "spans: %v", byName)
	job, call := byName["job"], byName["model.call"]
	require.Equal(t, job.SpanId, byName["container"].ParentSpanId)
	require.Equal(t, job.SpanId, byName["gates"].ParentSpanId)
	require.Equal(t, job.SpanId, call.ParentSpanId)
	require.Equal(t, tracepb.Status_STATUS_CODE_ERROR, job.Status.Code)
	require.Equal(t, uint64(40*time.Millisecond), job.EndTimeUnixNano-job.StartTimeUnixNano-uint64(10*time.Millisecond))
	vals := map[string]*commonpb.AnyValue{}
	for _, a := range call.Attributes {
		vals[a.Key] = a.Value
	}
	require.EqualValues(t, 4321, vals["pidispatch.cost.micros"].GetIntValue())
	require.EqualValues(t, 100, vals["gen_ai.usage.input_tokens"].GetIntValue())
	require.Equal(t, "claude-x", vals["gen_ai.request.model"].GetStringValue())
	require.Equal(t, "budget", stringAttr(byName["gate"], "pidispatch.gate"))
}

func stringAttr(s *tracepb.Span, key string) string {
	for _, a := range s.Attributes {
		if a.Key == key {
			return a.Value.GetStringValue()
		}
	}
	return ""
}

// Off (no provider) a Tracer costs what any observer's call costs: the
// same time as an observer that does nothing, and no allocation.
func BenchmarkObserveOff(b *testing.B) {
	benchObserve(b, tracing.New(nil))
}

// BenchmarkObserveNothing is the baseline: an observer that does nothing.
func BenchmarkObserveNothing(b *testing.B) {
	benchObserve(b, nothing{})
}

type nothing struct{}

func (nothing) Observe(dispatch.Event) {}

func benchObserve(b *testing.B, o dispatch.Observer) {
	obs := dispatch.Observers{o}
	ev := dispatch.Event{Kind: dispatch.EventStart, JobID: "job-1", Attempt: 1, At: time.Now()}
	fin := ev
	fin.Kind = dispatch.EventFinish
	b.ReportAllocs()
	for b.Loop() {
		obs.Observe(ev)
		obs.Observe(fin)
	}
}
