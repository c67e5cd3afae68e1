// Package metrics exports a worker's Prometheus metrics: counters and
// histograms fed by the Worker's events (it is a dispatch.Observer), and
// gauges read at scrape time from the queues and the fleet's budget. Each
// Metrics has its own registry, never the process-wide default, so two
// workers in one process (tests, the demo) never share a series.
// docs/metrics.md lists every metric.
package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/pidispatch/pidispatch/dispatch"
)

// Namespace prefixes every metric of this package.
const Namespace = "pidispatch"

// DefaultScrapeTimeout bounds the reads of the polled gauges in one scrape.
const DefaultScrapeTimeout = 2 * time.Second

// Buckets of the histograms, in seconds. A job runs from seconds to hours;
// a pickup takes milliseconds unless a gate waited.
var (
	durationBuckets = []float64{1, 5, 15, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200, 14400}
	pickupBuckets   = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}
)

// Outcomes the duration histogram pre-resolves (jobs.Outcome*).
var outcomes = []string{"completed", "policy", "failed"}

// Metrics is one worker's metrics. It implements dispatch.Observer; it is
// safe for concurrent use.
type Metrics struct {
	host    string
	reg     *prometheus.Registry
	timeout time.Duration // of the polled sources, per scrape

	started  prometheus.Counter
	finished *labelCache
	gates    *labelCache
	duration map[string]prometheus.Observer
	durVec   *prometheus.HistogramVec
	pickup   prometheus.Histogram
	lockLost prometheus.Counter
	stalled  prometheus.Counter
	spend    prometheus.Counter
	tokens   prometheus.Counter
	calls    prometheus.Counter
	up       *labelCache
	beatOK   prometheus.Counter
	beatFail prometheus.Counter
}

var _ dispatch.Observer = (*Metrics)(nil)

// Option configures New.
type Option func(*options)

type options struct {
	sources Sources
	timeout time.Duration
}

// WithSources adds the gauges read at scrape time from src; a nil field of
// src exports no gauge of its kind.
func WithSources(src Sources) Option {
	return func(o *options) { o.sources = src }
}

// WithScrapeTimeout bounds the polled sources' reads in one scrape (default
// DefaultScrapeTimeout).
func WithScrapeTimeout(d time.Duration) Option {
	return func(o *options) {
		if d > 0 {
			o.timeout = d
		}
	}
}

// New returns the metrics of the worker named host. Every series carries
// the label host, so a fleet's metrics can be summed or told apart.
func New(host string, opts ...Option) *Metrics {
	o := options{timeout: DefaultScrapeTimeout}
	for _, opt := range opts {
		opt(&o)
	}
	m := &Metrics{host: host, reg: prometheus.NewRegistry(), timeout: o.timeout}
	r := prometheus.WrapRegistererWith(prometheus.Labels{"host": host}, m.reg)
	m.define(r)
	r.MustRegister(newPoller(o.sources, o.timeout))
	m.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Registry is the registry every metric of m is in (the HTTP handler serves it).
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Host is the worker name m was made for.
func (m *Metrics) Host() string { return m.host }

func counter(r prometheus.Registerer, name, help string) prometheus.Counter {
	c := prometheus.NewCounter(prometheus.CounterOpts{Namespace: Namespace, Name: name, Help: help})
	r.MustRegister(c)
	return c
}

func counterVec(r prometheus.Registerer, name, help string, labels ...string) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: name, Help: help}, labels)
	r.MustRegister(c)
	return c
}

func (m *Metrics) define(r prometheus.Registerer) {
	m.started = counter(r, "jobs_started_total", "Job containers started.")
	m.finished = newLabelCache(counterVec(r, "jobs_finished_total",
		"Runs ended and recorded, by record outcome and reason.", "outcome", "reason"))
	m.gates = newLabelCache(counterVec(r, "gate_decisions_total",
		"Jobs a gate stopped, by gate and decision (defer, refuse, fail).", "gate", "decision"))
	m.durVec = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: Namespace, Name: "job_duration_seconds",
		Help:    "Run time of finished jobs, from container start to end, by outcome.",
		Buckets: durationBuckets,
	}, []string{"outcome"})
	r.MustRegister(m.durVec)
	m.duration = make(map[string]prometheus.Observer, len(outcomes))
	for _, o := range outcomes {
		m.duration[o] = m.durVec.WithLabelValues(o)
	}
	m.pickup = prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: Namespace, Name: "pickup_to_start_seconds",
		Help:    "Time from a job's pickup to its container start.",
		Buckets: pickupBuckets,
	})
	r.MustRegister(m.pickup)
	m.lockLost = counter(r, "lock_lost_total", "Running jobs whose queue lock this worker lost.")
	m.stalled = counter(r, "stalled_jobs_total", "Jobs the stalled check failed because their lock expired.")
	m.spend = counter(r, "spend_dollars_total", "Dollars finished runs spent through the model gateway.")
	m.tokens = counter(r, "model_tokens_total", "Model tokens finished runs used through the model gateway.")
	m.calls = counter(r, "model_calls_total", "Model calls finished runs made through the model gateway.")
	up := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: Namespace, Name: "service_up",
		Help: "Whether a service the worker depends on answered at its last use (1) or not (0).",
	}, []string{"service"})
	r.MustRegister(up)
	m.up = newGaugeCache(up)
	beats := counterVec(r, "registry_beats_total", "Registry heartbeats, by result (ok, failed).", "result")
	m.beatOK, m.beatFail = beats.WithLabelValues("ok"), beats.WithLabelValues("failed")
}

// Observe records ev. It only touches in-memory counters: it never blocks
// on I/O and takes a lock only the first time a label pair is seen.
func (m *Metrics) Observe(ev dispatch.Event) {
	switch ev.Kind {
	case dispatch.EventGate:
		m.gates.counter(ev.Gate, ev.Decision).Inc()
	case dispatch.EventStart:
		m.started.Inc()
		m.pickup.Observe(ev.PickupLatency.Seconds())
	case dispatch.EventFinish:
		m.finish(ev)
	case dispatch.EventLockLost:
		m.lockLost.Inc()
	case dispatch.EventStalled:
		if ev.Count > 0 {
			m.stalled.Add(float64(ev.Count))
		}
	case dispatch.EventReach:
		g := m.up.gauge(ev.Service)
		if ev.Up {
			g.Set(1)
		} else {
			g.Set(0)
		}
	case dispatch.EventBeat:
		if ev.Up {
			m.beatOK.Inc()
		} else {
			m.beatFail.Inc()
		}
	}
}

func (m *Metrics) finish(ev dispatch.Event) {
	m.finished.counter(ev.Outcome, string(ev.Reason)).Inc()
	if ev.Duration > 0 {
		h, ok := m.duration[ev.Outcome]
		if !ok {
			h = m.durVec.WithLabelValues(other)
		}
		h.Observe(ev.Duration.Seconds())
	}
	if ev.SpendMicros > 0 {
		m.spend.Add(float64(ev.SpendMicros) / 1e6)
	}
	if ev.Tokens > 0 {
		m.tokens.Add(float64(ev.Tokens))
	}
	if ev.Calls > 0 {
		m.calls.Add(float64(ev.Calls))
	}
}
