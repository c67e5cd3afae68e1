package stack

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/fleetstate"
	"github.com/pidispatch/pidispatch/lease"
	"github.com/pidispatch/pidispatch/queue"
	"github.com/pidispatch/pidispatch/registry"
)

// Fleet is the Valkey driver of the fleet's stores (dispatch.Fleet): every
// host it opens keeps its queues, start and dollar budgets, holds, leases,
// registry row, run mirror, cancel requests, rate limits and forge threads'
// lines in one Valkey.
// Close closes what it opened; the client stays the caller's.
type Fleet struct {
	rc  redis.UniversalClient
	opt FleetOptions

	mu     sync.Mutex
	opened []*valkeyStores
}

var _ dispatch.Fleet = (*Fleet)(nil)

// FleetOptions are the fleet-wide settings of a Fleet.
type FleetOptions struct {
	// FleetKey signs the registry row and re-signs a job moved off a dead
	// host's queue. Unset: rows and moves are unsigned.
	FleetKey fleet.Key
	// Layout is the queues' key layout (PI_BULLMQ_LAYOUT).
	Layout queue.Layout
	// RetentionDays is how long the run mirror keeps a run (0: its default).
	RetentionDays int
	// ThreadSettle is how long a forge thread's first job waits after its
	// enqueue before it takes the thread, so jobs enqueued a moment apart on
	// two hosts run in order (fleetstate.ThreadsConfig.Settle; 0: none).
	ThreadSettle time.Duration
	// BlockTimeout bounds one wait of a Source for a job (0:
	// queue.DefaultBlockTimeout): a cancelled wait returns within it.
	BlockTimeout time.Duration
	// CancelPoll is how often cancel requests are read (0:
	// fleetstate.DefaultCancelPoll).
	CancelPoll time.Duration
	// CallTimeout bounds each store's Valkey calls (0: each store's default).
	CallTimeout time.Duration
}

// NewFleet returns the driver of the fleet on rc.
func NewFleet(rc redis.UniversalClient, o FleetOptions) *Fleet { return &Fleet{rc: rc, opt: o} }

// Open returns host's stores: the shared queue and, for a declared host,
// its own (declared now, so the kill switch finds it before its first job;
// it starts paused when the fleet is paused), a Source over them, the
// budgets, holds, registry row, directory, run mirror, cancel watcher,
// rate limits and forge threads' lines, and fleet leases for a declared host.
func (f *Fleet) Open(ctx context.Context, h dispatch.FleetHost) (dispatch.Stores, error) {
	s, err := f.open(ctx, h)
	if err != nil {
		return dispatch.Stores{}, err
	}
	return s.stores, nil
}

// Close closes every store Open opened: a Source's connection, the mirror's
// writes in flight and the budgets', holds' and threads' pending work. It
// does not close the client.
func (f *Fleet) Close(ctx context.Context) error {
	f.mu.Lock()
	opened := f.opened
	f.opened = nil
	f.mu.Unlock()
	var errs []error
	for _, s := range opened {
		errs = append(errs, s.close(ctx))
	}
	return errors.Join(errs...)
}

// valkeyStores are one host's stores, with the concrete parts the stack
// wires beyond the Worker (cron, metrics, Stack's fields).
type valkeyStores struct {
	stores   dispatch.Stores
	queues   []*queue.Queue
	consumer *queue.Consumer
	registry *registry.Registry
	budget   *fleetstate.Budget
	holds    *fleetstate.Holds
	dollars  *fleetstate.Dollars
	limits   *fleetstate.RateLimits
	threads  *fleetstate.Threads
	mirror   *fleetstate.Mirror
}

func (s *valkeyStores) close(ctx context.Context) error {
	return errors.Join(
		s.consumer.Close(), s.mirror.Close(ctx),
		s.budget.Close(ctx), s.dollars.Close(ctx), s.limits.Close(ctx), s.holds.Close(ctx),
		s.threads.Close(ctx))
}

func (f *Fleet) open(ctx context.Context, h dispatch.FleetHost) (*valkeyStores, error) {
	if err := fleet.ValidateName(h.Name); err != nil {
		return nil, err
	}
	logger := h.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	log := logger.With("host", h.Name)
	queues, err := f.queues(ctx, h, log)
	if err != nil {
		return nil, err
	}
	consumer, err := queue.NewConsumer(queues, queue.ConsumerConfig{BlockTimeout: f.opt.BlockTimeout})
	if err != nil {
		return nil, err
	}
	reg, err := f.registry(h, logger)
	if err != nil {
		_ = consumer.Close()
		return nil, err
	}
	cancels, err := fleetstate.NewCancelWatcher(f.rc, h.Name, fleetstate.CancelWatcherConfig{Poll: f.opt.CancelPoll, Logger: logger})
	if err != nil {
		_ = consumer.Close()
		return nil, err
	}
	dir, err := queue.NewDirectory(f.rc, queue.Config{})
	if err != nil {
		_ = consumer.Close()
		return nil, err
	}
	call := f.opt.CallTimeout
	s := &valkeyStores{
		queues:   queues,
		consumer: consumer,
		registry: reg,
		budget: fleetstate.NewBudget(f.rc, fleetstate.BudgetConfig{
			DailyCap: h.Starts.Daily, WeeklyCap: h.Starts.Weekly, MonthlyCap: h.Starts.Monthly, SoftHoldPct: h.Starts.SoftHoldPct,
			CallTimeout: call, Host: h.Name, Logger: logger,
		}),
		holds: fleetstate.NewHolds(f.rc, fleetstate.HoldsConfig{CallTimeout: call}),
		dollars: fleetstate.NewDollars(f.rc, fleetstate.DollarsConfig{
			DailyMicros: h.Dollars.Daily, WeeklyMicros: h.Dollars.Weekly, MonthlyMicros: h.Dollars.Monthly,
			CallTimeout: call, Host: h.Name, Logger: logger,
		}),
		limits:  fleetstate.NewRateLimits(f.rc, fleetstate.RateLimitsConfig{CallTimeout: call, Host: h.Name, Logger: logger}),
		threads: fleetstate.NewThreads(f.rc, fleetstate.ThreadsConfig{CallTimeout: call, Host: h.Name, Logger: logger, Settle: f.opt.ThreadSettle}),
		mirror:  fleetstate.NewMirror(f.rc, fleetstate.MirrorConfig{RetentionDays: f.opt.RetentionDays, CallTimeout: call, Host: h.Name, Logger: logger}),
	}
	fleetDir := SigningDirectory(dir, f.opt.FleetKey)
	s.stores = dispatch.Stores{
		Source:     Source(consumer),
		Budget:     s.budget,
		Registry:   Registry(reg),
		Mirror:     s.mirror,
		Directory:  fleetDir,
		Holds:      s.holds,
		Finder:     fleetDir, // held-job liveness across every queue
		Cancels:    cancels,
		Dollars:    s.dollars,
		RateLimits: s.limits,
		Threads:    s.threads,
	}
	for _, q := range queues {
		s.stores.Queues = append(s.stores.Queues, JobQueue(q))
	}
	if h.Declared {
		s.stores.Leases = Leaser(lease.New(f.rc, h.Name, lease.Config{CallTimeout: call, Logger: logger}))
	}
	f.mu.Lock()
	f.opened = append(f.opened, s)
	f.mu.Unlock()
	return s, nil
}

// queues are the queues host drains: the shared queue and, when the name is
// declared, the host's own, declared now.
func (f *Fleet) queues(ctx context.Context, h dispatch.FleetHost, log *slog.Logger) ([]*queue.Queue, error) {
	qcfg := queue.Config{LockTTL: h.LockTTL, WorkerName: h.Name, Logger: log, Layout: f.opt.Layout}
	shared, err := queue.New(f.rc, fleet.SharedQueue, qcfg)
	if err != nil {
		return nil, err
	}
	if !h.Declared {
		return []*queue.Queue{shared}, nil
	}
	host, err := queue.New(f.rc, fleet.HostQueueName(h.Name), qcfg)
	if err != nil {
		return nil, err
	}
	dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	paused, err := fleetstate.DeclareHostQueue(dctx, host)
	cancel()
	switch {
	case err != nil:
		log.Warn("host_queue_declare_failed", "queue", host.Name(), "err", err)
	case paused:
		log.Warn("host_queue_starts_paused", "queue", host.Name(), "reason", "the fleet is paused (pi-dispatch resume)")
	}
	return []*queue.Queue{shared, host}, nil
}

// registry is host's registry row, not yet started.
func (f *Fleet) registry(h dispatch.FleetHost, logger *slog.Logger) (*registry.Registry, error) {
	row := h.Row
	facts := registry.Facts{
		Image:       registry.Value(row.Image),
		ImageDigest: registry.Value(row.ImageDigest),
		Concurrency: registry.Value(row.Concurrency),
		Routes:      registry.Value(h.Declared),
		Caps:        registry.Value(row.Caps),
		TZ:          registry.Value(row.TZ),
	}
	if row.FPCron != nil {
		facts.FPCron = row.FPCron
	}
	if row.CronCount != nil {
		facts.CronCount = row.CronCount
	}
	return registry.New(f.rc, h.Name, facts, registry.Config{
		Version: row.Version, Logger: logger, FleetKey: f.opt.FleetKey, Machine: h.Machine, OnBeat: row.OnBeat,
	})
}
