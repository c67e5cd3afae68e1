package metrics

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Sources are what the gauges are read from at scrape time. Each is a
// small interface so any store can serve it; a nil one exports nothing.
type Sources struct {
	// Queues counts the jobs of this host's queues by state.
	Queues QueueCounter
	// Held counts the jobs held on their waitFor conditions.
	Held HeldCounter
	// Starts reads the container-start windows (Used and Cap; Reserved is
	// not exported for them).
	Starts WindowReader
	// Dollars reads the dollar windows, in dollars.
	Dollars WindowReader
}

// QueueCounts is one queue's jobs by state ("waiting", "active", ...).
type QueueCounts struct {
	Queue   string
	ByState map[string]int64
}

// QueueCounter reads the job counts of the queues a worker drains.
type QueueCounter interface {
	QueueCounts(ctx context.Context) ([]QueueCounts, error)
}

// HeldCounter counts held jobs.
type HeldCounter interface {
	HeldJobs(ctx context.Context) (int, error)
}

// Window is one budget window's state: what is used, what running jobs
// hold reserved, and its cap (0: no cap).
type Window struct {
	Name                string
	Used, Reserved, Cap float64
}

// WindowReader reads budget windows.
type WindowReader interface {
	ReadWindows(ctx context.Context) ([]Window, error)
}

// QueueCounterFunc adapts a function to QueueCounter.
type QueueCounterFunc func(ctx context.Context) ([]QueueCounts, error)

// QueueCounts calls f.
func (f QueueCounterFunc) QueueCounts(ctx context.Context) ([]QueueCounts, error) { return f(ctx) }

// HeldCounterFunc adapts a function to HeldCounter.
type HeldCounterFunc func(ctx context.Context) (int, error)

// HeldJobs calls f.
func (f HeldCounterFunc) HeldJobs(ctx context.Context) (int, error) { return f(ctx) }

// WindowReaderFunc adapts a function to WindowReader.
type WindowReaderFunc func(ctx context.Context) ([]Window, error)

// ReadWindows calls f.
func (f WindowReaderFunc) ReadWindows(ctx context.Context) ([]Window, error) { return f(ctx) }

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(prometheus.BuildFQName(Namespace, "", name), help, labels, nil)
}

var (
	descQueueJobs = desc("queue_jobs", "Jobs on this host's queues, by queue and state.", "queue", "state")
	descHeld      = desc("held_jobs", "Jobs held on their waitFor conditions, fleet-wide.")
	descStarts    = desc("container_starts", "Container starts counted in the current budget window.", "window")
	descStartsCap = desc("container_starts_cap", "Cap of container starts of a budget window.", "window")
	descUsed      = desc("spend_used_dollars", "Dollars settled in the current spend window.", "window")
	descReserved  = desc("spend_reserved_dollars", "Dollars running jobs hold reserved in the current spend window.", "window")
	descCap       = desc("spend_cap_dollars", "Dollar cap of a spend window.", "window")
	descSourceUp  = desc("scrape_source_up", "Whether a polled source answered within the scrape timeout (1) or not (0).", "source")
)

// poller is the Collector of the polled gauges: it reads every source at
// scrape time, all at once and bounded by timeout, and exports nothing of a
// source that failed but its scrape_source_up 0.
type poller struct {
	src     Sources
	timeout time.Duration
}

func newPoller(src Sources, timeout time.Duration) *poller {
	return &poller{src: src, timeout: timeout}
}

func (p *poller) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descQueueJobs, descHeld, descStarts, descStartsCap, descUsed, descReserved, descCap, descSourceUp} {
		ch <- d
	}
}

// Collect reads the sources concurrently and waits for all of them: each
// gets a context that ends after timeout, so none outlives the scrape.
func (p *poller) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), p.timeout)
	defer cancel()
	var wg sync.WaitGroup
	read := func(name string, set bool, f func(ctx context.Context, out *[]prometheus.Metric) error) {
		if !set {
			return
		}
		wg.Go(func() {
			var out []prometheus.Metric
			up := 1.0
			if err := f(ctx, &out); err != nil || ctx.Err() != nil {
				out, up = nil, 0
			}
			for _, m := range out {
				ch <- m
			}
			ch <- prometheus.MustNewConstMetric(descSourceUp, prometheus.GaugeValue, up, name)
		})
	}
	read("queues", p.src.Queues != nil, p.queues)
	read("held", p.src.Held != nil, p.held)
	read("starts", p.src.Starts != nil, p.starts)
	read("dollars", p.src.Dollars != nil, p.dollars)
	wg.Wait()
}

func gauge(d *prometheus.Desc, v float64, labels ...string) prometheus.Metric {
	return prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
}

func (p *poller) queues(ctx context.Context, out *[]prometheus.Metric) error {
	qs, err := p.src.Queues.QueueCounts(ctx)
	if err != nil {
		return err
	}
	for _, q := range qs {
		for state, n := range q.ByState {
			*out = append(*out, gauge(descQueueJobs, float64(n), q.Queue, state))
		}
	}
	return nil
}

func (p *poller) held(ctx context.Context, out *[]prometheus.Metric) error {
	n, err := p.src.Held.HeldJobs(ctx)
	if err != nil {
		return err
	}
	*out = append(*out, gauge(descHeld, float64(n)))
	return nil
}

func (p *poller) starts(ctx context.Context, out *[]prometheus.Metric) error {
	ws, err := p.src.Starts.ReadWindows(ctx)
	if err != nil {
		return err
	}
	for _, w := range ws {
		*out = append(*out, gauge(descStarts, w.Used, w.Name))
		if w.Cap > 0 {
			*out = append(*out, gauge(descStartsCap, w.Cap, w.Name))
		}
	}
	return nil
}

func (p *poller) dollars(ctx context.Context, out *[]prometheus.Metric) error {
	ws, err := p.src.Dollars.ReadWindows(ctx)
	if err != nil {
		return err
	}
	for _, w := range ws {
		*out = append(*out, gauge(descUsed, w.Used, w.Name), gauge(descReserved, w.Reserved, w.Name))
		if w.Cap > 0 {
			*out = append(*out, gauge(descCap, w.Cap, w.Name))
		}
	}
	return nil
}
