package stack

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/redis/go-redis/v9"

	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/fleetstate"
	"github.com/pidispatch/pidispatch/metrics"
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
func wireMetrics(cfg dispatch.Config, rc *redis.Client, queues []*queue.Queue, budget *fleetstate.Budget, deps *dispatch.Deps) (*metrics.Metrics, *consumersRunning) {
	running := &consumersRunning{}
	deps.Background = append(deps.Background, running)
	if cfg.Gateway.MetricsAddr == "" {
		return nil, running
	}
	m := metrics.New(cfg.WorkerName, metrics.WithSources(metrics.Sources{
		Queues:  queueCounts(queues),
		Held:    metrics.HeldCounterFunc(func(ctx context.Context) (int, error) { return fleetstate.HeldCount(ctx, rc) }),
		Starts:  startWindows(budget, cfg),
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

// startWindows reads the fleet's container-start counts against their caps:
// the UTC day always, the ISO week when PI_WEEKLY_CAP is set.
func startWindows(b *fleetstate.Budget, cfg dispatch.Config) metrics.WindowReader {
	return metrics.WindowReaderFunc(func(ctx context.Context) ([]metrics.Window, error) {
		day, week, err := b.Counts(ctx)
		if err != nil {
			return nil, err
		}
		out := []metrics.Window{{Name: "day", Used: float64(day), Cap: float64(cfg.DailyCap)}}
		if cfg.WeeklyCap > 0 {
			out = append(out, metrics.Window{Name: "week", Used: float64(week), Cap: float64(cfg.WeeklyCap)})
		}
		return out, nil
	})
}

// dollarWindows is the dollar windows' source: a DollarBudget that reads
// its windows as metrics.Window exports them; nil (no dollar gauges)
// otherwise.
func dollarWindows(d dispatch.DollarBudget) metrics.WindowReader {
	if r, ok := d.(metrics.WindowReader); ok {
		return r
	}
	return nil
}

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
// a *dispatch.ConfigError naming PI_METRICS_ADDR.
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
		return nil, &dispatch.ConfigError{Var: "PI_METRICS_ADDR", Value: s.metricsAddr, Rule: rule}
	}
	return srv, nil
}
