// Package tracing turns a worker's decisions into OpenTelemetry spans: one
// span per job attempt, with a child for its gates (pickup to start), its
// container (start to finish) and each model call the gateway made (with
// its tokens and cost). A gate that stops a job is a span of its own.
//
// Spans are exported over OTLP/HTTP when the standard
// OTEL_EXPORTER_OTLP_ENDPOINT (or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) is
// set; the SDK reads its other OTEL_* variables itself. Without them the
// stack wires no Tracer at all, and a Tracer built with no provider does
// nothing (BenchmarkObserveOff).
package tracing

import (
	"context"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/gateway"
	"github.com/pidispatch/pidispatch/jobs"
)

// ScopeName is the instrumentation scope of every span.
const ScopeName = "github.com/pidispatch/pidispatch"

// maxOpen bounds the job spans held open at once; more than a worker can
// run means finishes were lost, and the oldest are ended.
const maxOpen = 4096

// Tracer is a dispatch.Observer that makes spans of a worker's events.
// Safe for concurrent use.
type Tracer struct {
	tr   trace.Tracer
	stop func(context.Context) error

	mu   sync.Mutex
	open map[runKey]*jobSpans
}

type runKey struct {
	job     string
	attempt int
}

type jobSpans struct {
	ctx       context.Context // holds the job span
	job       trace.Span
	container trace.Span
}

var _ dispatch.Observer = (*Tracer)(nil)

// New is a Tracer on provider; nil provider: a Tracer that does nothing.
func New(provider trace.TracerProvider) *Tracer {
	t := &Tracer{open: map[runKey]*jobSpans{}, stop: func(context.Context) error { return nil }}
	if provider != nil {
		t.tr = provider.Tracer(ScopeName)
	}
	return t
}

// NewOTLP is a Tracer exporting over OTLP/HTTP as the OTEL_EXPORTER_OTLP_*
// variables say, its spans naming host. Shutdown flushes it.
func NewOTLP(ctx context.Context, host, version string) (*Tracer, error) {
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, err
	}
	res := resource.NewWithAttributes(semconv.SchemaURL,
		semconv.ServiceName("pidispatch-worker"), semconv.ServiceVersion(version), semconv.HostName(host))
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	t := New(tp)
	t.stop = tp.Shutdown
	return t, nil
}

// Shutdown ends the spans still open and flushes the exporter, within ctx.
func (t *Tracer) Shutdown(ctx context.Context) error {
	t.mu.Lock()
	for k, s := range t.open {
		s.end(time.Now())
		delete(t.open, k)
	}
	t.mu.Unlock()
	return t.stop(ctx)
}

// Observe makes or ends spans for starts, gate stops and finishes.
func (t *Tracer) Observe(ev dispatch.Event) {
	if t.tr == nil {
		return
	}
	switch ev.Kind {
	case dispatch.EventStart:
		t.start(ev)
	case dispatch.EventGate:
		t.gateSpan(ev)
	case dispatch.EventFinish:
		t.finish(ev)
	case dispatch.EventLockLost:
		t.mu.Lock()
		if s := t.open[runKey{ev.JobID, ev.Attempt}]; s != nil {
			s.job.AddEvent("lock-lost", trace.WithTimestamp(ev.At))
		}
		t.mu.Unlock()
	}
}

func jobAttrs(ev dispatch.Event) []attribute.KeyValue {
	return []attribute.KeyValue{
		attribute.String("pidispatch.job.id", ev.JobID),
		attribute.Int("pidispatch.job.attempt", ev.Attempt),
		attribute.String("pidispatch.queue", ev.Queue),
		attribute.String("pidispatch.host", ev.Host),
	}
}

func (t *Tracer) start(ev dispatch.Event) {
	picked := ev.At.Add(-ev.PickupLatency)
	ctx, job := t.tr.Start(context.Background(), "job", trace.WithTimestamp(picked), trace.WithAttributes(jobAttrs(ev)...), trace.WithSpanKind(trace.SpanKindConsumer))
	_, gates := t.tr.Start(ctx, "gates", trace.WithTimestamp(picked))
	gates.End(trace.WithTimestamp(ev.At))
	_, ctr := t.tr.Start(ctx, "container", trace.WithTimestamp(ev.At))
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.open) >= maxOpen {
		for k, s := range t.open {
			s.end(ev.At)
			delete(t.open, k)
			break
		}
	}
	k := runKey{ev.JobID, ev.Attempt}
	if old := t.open[k]; old != nil {
		old.end(ev.At)
	}
	t.open[k] = &jobSpans{ctx: ctx, job: job, container: ctr}
}

// gateSpan is a job stopped at a gate: a span of its own, as long as the
// time from pickup is not known, a point.
func (t *Tracer) gateSpan(ev dispatch.Event) {
	attrs := append(jobAttrs(ev),
		attribute.String("pidispatch.gate", ev.Gate),
		attribute.String("pidispatch.gate.decision", ev.Decision),
		attribute.String("pidispatch.reason", string(ev.Reason)))
	if ev.Delay > 0 {
		attrs = append(attrs, attribute.Int64("pidispatch.gate.delay_ms", ev.Delay.Milliseconds()))
	}
	_, s := t.tr.Start(context.Background(), "gate", trace.WithTimestamp(ev.At), trace.WithAttributes(attrs...))
	if ev.Decision == dispatch.DecisionFail {
		s.SetStatus(codes.Error, string(ev.Reason))
	}
	s.End(trace.WithTimestamp(ev.At))
}

func (t *Tracer) finish(ev dispatch.Event) {
	k := runKey{ev.JobID, ev.Attempt}
	t.mu.Lock()
	s := t.open[k]
	delete(t.open, k)
	t.mu.Unlock()
	if s == nil {
		return // refused before a start: its gate span told it
	}
	attrs := []attribute.KeyValue{
		attribute.String("pidispatch.outcome", ev.Outcome),
		attribute.String("pidispatch.reason", string(ev.Reason)),
		attribute.Int64("pidispatch.spend.micros", ev.SpendMicros),
		attribute.Int64("pidispatch.spend.tokens", ev.Tokens),
		attribute.Int("pidispatch.spend.calls", ev.Calls),
	}
	s.job.SetAttributes(attrs...)
	s.container.SetAttributes(attrs[:2]...)
	if ev.Outcome == jobs.OutcomeFailed {
		s.job.SetStatus(codes.Error, string(ev.Reason))
		s.container.SetStatus(codes.Error, string(ev.Reason))
	}
	s.end(ev.At)
}

func (s *jobSpans) end(at time.Time) {
	s.container.End(trace.WithTimestamp(at))
	s.job.End(trace.WithTimestamp(at))
}

// ModelCall is a gateway call as a child span of its job's (a gateway
// Config.OnCall).
func (t *Tracer) ModelCall(c gateway.CallEvent) {
	if t.tr == nil {
		return
	}
	t.mu.Lock()
	s := t.open[runKey{c.JobID, c.Attempt}]
	t.mu.Unlock()
	ctx := context.Background()
	if s != nil {
		ctx = s.ctx
	}
	_, sp := t.tr.Start(ctx, "model.call", trace.WithTimestamp(c.Start), trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(
		attribute.String("pidispatch.job.id", c.JobID),
		attribute.Int("pidispatch.job.attempt", c.Attempt),
		attribute.String("gen_ai.system", c.Provider),
		attribute.String("gen_ai.request.model", c.Model),
		attribute.Int("http.response.status_code", c.Status),
		attribute.Int64("gen_ai.usage.input_tokens", c.Usage.Input+c.Usage.CacheRead+c.Usage.CacheWrite),
		attribute.Int64("gen_ai.usage.output_tokens", c.Usage.Output),
		attribute.Int64("pidispatch.cost.micros", c.Micros),
		attribute.Bool("pidispatch.cost.estimated", c.Estimated),
		attribute.Bool("pidispatch.cost.priced", c.Priced),
	))
	if c.Status == 0 || c.Status >= 400 {
		sp.SetStatus(codes.Error, "model call failed")
	}
	sp.End(trace.WithTimestamp(c.End))
}
