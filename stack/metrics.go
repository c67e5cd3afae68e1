package stack

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/redis/go-redis/v9"

	"github.com/pidispatch/pidispatch/config"
	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/fleetstate"
	"github.com/pidispatch/pidispatch/observe/metrics"
	"github.com/pidispatch/pidispatch/queue"
)

// ErrConsumersStopped is Ready's answer while the Worker's consumers are
// not running: before Run started them, or after it stopped.
var ErrConsumersStopped = errors.New("worker consumers not running")

// consumersRunning is a Background part: the Worker starts its Background
// parts with its consumers and stops them when it stops fetching, so while
// Run is here the consumers run. The Worker has no signal of its own.
type consumersRunning struct{ on atomic.Bool }

func (c *consumersRunning) Run(ctx context.Context) error {
	c.on.Store(true)
	defer c.on.Store(false)
	<-ctx.Done()
	return nil
}

// wireMetrics adds the running flag to deps and, when PI_METRICS_ADDR is
// set, the Prometheus observer with its polled sources. It runs after the
// Options, so an Option's Dollars is read too.
func wireMetrics(cfg config.Config, rc *redis.Client, queues []*queue.Queue, budget *fleetstate.Budget, deps *dispatch.Deps) (*metrics.Metrics, *consumersRunning) {
	running := &consumersRunning{}
	deps.Background = append(deps.Background, running)
	if cfg.Gateway.MetricsAddr == "" {
		return nil, running
	}
	m := metrics.New(cfg.WorkerName, metrics.WithSources(metrics.Sources{
		Queues:  queueCounts(queues),
		Held:    metrics.HeldCounterFunc(func(ctx context.Context) (int, error) { return fleetstate.HeldCount(ctx, rc) }),
		Starts:  startWindows(budget),
		Dollars: dollarWindows(deps.Dollars),
	}))
	deps.Observers = append(deps.Observers, m)
	return m, running
}

// queueCounts reads the counts of this host's queues (the shared queue and,
// when the name is declared, its own), the numbers pi-dispatch status shows.
func queueCounts(queues []*queue.Queue) metrics.QueueCounter {
	return metrics.QueueCounterFunc(func(ctx context.Context) ([]metrics.QueueCounts, error) {
		out := make([]metrics.QueueCounts, 0, len(queues))
		for _, q := range queues {
			c, err := q.Counts(ctx)
			if err != nil {
				return nil, err
			}
			out = append(out, metrics.QueueCounts{Queue: q.Name(), ByState: map[string]int64{
				"waiting": c.Waiting, "active": c.Active, "paused": c.Paused, "delayed": c.Delayed,
				"prioritized": c.Prioritized, "completed": c.Completed, "failed": c.Failed,
			}})
		}
		return out, nil
	})
}

// startWindows reads the fleet's container-start windows against their
// caps: the UTC day always, the ISO week and the month when their caps are
// set (fleetstate.Budget.Windows).
func startWindows(b *fleetstate.Budget) metrics.WindowReader {
	return metrics.WindowReaderFunc(func(ctx context.Context) ([]metrics.Window, error) {
		ws, err := b.Windows(ctx)
		if err != nil {
			return nil, err
		}
		out := make([]metrics.Window, len(ws))
		for i, w := range ws {
			out[i] = metrics.Window{Name: w.Name, Used: float64(w.Count), Cap: float64(w.Cap)}
		}
		return out, nil
	})
}

// dollarReader is what the dollar gauges read: *fleetstate.Dollars.
type dollarReader interface {
	Windows(ctx context.Context) ([]fleetstate.DollarWindow, error)
}

// dollarWindows reads the fleet's dollar windows (settled, reserved, cap) in
// dollars, from a DollarBudget that can report them; nil (no dollar gauges)
// for one that cannot, such as an Option's own.
func dollarWindows(d dispatch.DollarBudget) metrics.WindowReader {
	r, ok := d.(dollarReader)
	if !ok {
		return nil
	}
	return metrics.WindowReaderFunc(func(ctx context.Context) ([]metrics.Window, error) {
		ws, err := r.Windows(ctx)
		if err != nil {
			return nil, err
		}
		out := make([]metrics.Window, len(ws))
		for i, w := range ws {
			out[i] = metrics.Window{Name: w.Name, Used: dollars(w.SpentMicros), Reserved: dollars(w.ReservedMicros), Cap: dollars(w.CapMicros)}
		}
		return out, nil
	})
}

func dollars(micros int64) float64 { return float64(micros) / 1e6 }

// Ready says whether the worker can take jobs: Valkey answers a ping and
// the Worker's consumers run. It is what /readyz serves.
func (s *Stack) Ready(ctx context.Context) error {
	if err := s.Valkey.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("valkey unreachable: %w", err)
	}
	if s.consumers == nil || !s.consumers.on.Load() {
		return ErrConsumersStopped
	}
	return nil
}

// ListenMetrics binds PI_METRICS_ADDR for the metrics, /healthz and /readyz
// before the Worker runs, so a bad or taken port refuses boot. It returns a
// nil Server when PI_METRICS_ADDR is unset; a port that cannot be bound is
// a *config.ConfigError naming PI_METRICS_ADDR.
func (s *Stack) ListenMetrics() (*metrics.Server, error) {
	if s.Metrics == nil {
		return nil, nil
	}
	srv, err := metrics.Listen(s.metricsAddr, s.Metrics, s.Ready)
	if err != nil {
		var le *metrics.ListenError
		rule := err.Error()
		if errors.As(err, &le) {
			rule = "cannot listen: " + le.Err.Error() + " (choose a free port, or unset it to serve no metrics)"
		}
		return nil, &config.ConfigError{Var: "PI_METRICS_ADDR", Value: s.metricsAddr, Rule: rule}
	}
	return srv, nil
}
