// Package stack wires one concrete worker: Valkey for the queues and fleet
// state, Docker for the job containers, the triggers file for cron. The
// library (package dispatch) holds only interfaces; this is where the real
// implementations meet, shared by cmd/worker, the CLI's demo and the tests.
package stack

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/moby/moby/client"
	"github.com/redis/go-redis/v9"

	"github.com/pidispatch/pidispatch/capabilities"
	"github.com/pidispatch/pidispatch/cronsync"
	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/fleetstate"
	"github.com/pidispatch/pidispatch/lease"
	"github.com/pidispatch/pidispatch/metrics"
	"github.com/pidispatch/pidispatch/queue"
	"github.com/pidispatch/pidispatch/registry"
	"github.com/pidispatch/pidispatch/runner"
	"github.com/pidispatch/pidispatch/valkey"
)

// Stack is one concrete worker: Valkey for queues and fleet state, Docker for
// containers. Close releases the clients after the Worker's Run returned.
type Stack struct {
	Worker   *dispatch.Worker
	Valkey   *redis.Client
	Docker   *client.Client
	Registry *registry.Registry
	Budget   *fleetstate.Budget
	Holds    *fleetstate.Holds
	// Dollars and RateLimits are the fleet's dollar windows and provider
	// rate-limit suspensions.
	Dollars    *fleetstate.Dollars
	RateLimits *fleetstate.RateLimits
	// Metrics is the worker's Prometheus metrics when PI_METRICS_ADDR is
	// set, nil otherwise; ListenMetrics serves it (stack/metrics.go).
	Metrics *metrics.Metrics

	metricsAddr string
	consumers   *consumersRunning
	report      *report
	closeOnce   sync.Once
}

// Close is Shutdown for a caller without a context (a deferred Close).
func (s *Stack) Close() { s.Shutdown(context.Background()) }

// Shutdown flushes the stores' last writes and the traces, within ctx and at
// most 5 seconds (the writes happen even when ctx is already cancelled), then
// closes the Valkey and Docker clients. Calls after the first do nothing.
func (s *Stack) Shutdown(ctx context.Context) {
	s.closeOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = s.Budget.Close(ctx)
		_ = s.Dollars.Close(ctx)
		_ = s.RateLimits.Close(ctx)
		_ = s.Holds.Close(ctx)
		_ = s.report.close(ctx)
		_ = s.Valkey.Close()
		_ = s.Docker.Close()
	})
}

// Option changes the wired collaborators before the Worker is built: a
// service may replace any part (its own Runtime, a Budgeter of its own, an
// extra Background task) and NewWorker still checks the whole.
type Option func(*dispatch.Deps)

// Build wires the concrete implementations (Valkey, Docker) into a
// dispatch.Worker. It is the only place that does: cmd/worker, the demo and
// the tests all boot workers through it. logger receives every event unless
// tune.Logger is set; opts apply in order.
func Build(ctx context.Context, cfg dispatch.Config, logger *slog.Logger, tune dispatch.Tuning, opts ...Option) (*Stack, error) {
	rc, err := valkey.NewClient(cfg.ValkeyURL, valkey.Options{Password: cfg.ValkeyPassword})
	if err != nil {
		return nil, &dispatch.ConfigError{Var: "VALKEY_URL", Value: dispatch.RedactURL(cfg.ValkeyURL), Rule: err.Error()}
	}
	if err := refusedPassword(ctx, rc, cfg.ValkeyURL); err != nil {
		_ = rc.Close()
		return nil, err
	}

	dc, err := client.New(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		_ = rc.Close()
		return nil, fmt.Errorf("docker client: %w", err)
	}
	fail := func(err error) (*Stack, error) {
		_ = rc.Close()
		_ = dc.Close()
		return nil, err
	}

	if tune.Logger == nil {
		tune.Logger = logger
	}
	log := tune.Logger.With("host", cfg.WorkerName)

	// Components that stamp the host themselves get the bare logger.
	runtime, err := runner.NewDocker(dc, runner.Config{
		Memory: cfg.JobMemory, CPUs: cfg.JobCPUs, Timeout: cfg.JobTimeout, OutputMax: cfg.JobOutputMax, Logger: tune.Logger,
	})
	if err != nil {
		return fail(err)
	}

	queues, err := newQueues(ctx, rc, cfg, tune, log)
	if err != nil {
		return fail(err)
	}
	consumer, err := queue.NewConsumer(queues, queue.ConsumerConfig{})
	if err != nil {
		return fail(err)
	}
	budget := fleetstate.NewBudget(rc, fleetstate.BudgetConfig{
		DailyCap: cfg.DailyCap, WeeklyCap: cfg.WeeklyCap, MonthlyCap: cfg.Spend.MonthlyCap, SoftHoldPct: cfg.Spend.SoftHoldPct,
		Host: cfg.WorkerName, Logger: tune.Logger,
	})
	holds := fleetstate.NewHolds(rc, fleetstate.HoldsConfig{})
	deps := dispatch.Deps{
		Source:  Source(consumer),
		Runtime: runtime,
		Budget:  budget,
		Holds:   holds,
	}
	for _, q := range queues {
		deps.Queues = append(deps.Queues, JobQueue(q))
	}

	// Cron: the triggers file is read before anything reaches Valkey; a file
	// that does not parse refuses boot.
	own, err := readTriggers(cfg)
	if err != nil {
		return fail(err)
	}
	tz := registry.LocalZone(os.Getenv)
	live := cronsync.NewLiveSet(own, tz)

	reg, err := newRegistry(ctx, rc, cfg, tune, runtime, live, tz, &deps)
	if err != nil {
		return fail(err)
	}
	deps.Registry = Registry(reg)
	deps.Cron = cronGate{live: live, peers: reg, host: cfg.WorkerName}
	if err := wireFleet(cfg, rc, tune, &deps); err != nil {
		return fail(err)
	}

	deps.Background = append(deps.Background, cronBackground(cfg, queues[len(queues)-1], reg, live, tz, tune, log))

	cancels, err := fleetstate.NewCancelWatcher(rc, cfg.WorkerName, fleetstate.CancelWatcherConfig{Logger: tune.Logger})
	if err != nil {
		return fail(err)
	}
	deps.Cancels = cancels

	report, err := newReport(ctx, cfg, rc, tune)
	if err != nil {
		return fail(err)
	}
	failBuilt := fail
	fail = func(err error) (*Stack, error) {
		// The report's last write must happen though ctx may be what ended the build.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = report.close(cctx)
		return failBuilt(err)
	}
	report.wire(&deps)
	dollars, limits, err := wireSpend(cfg, rc, tune, &deps, report)
	if err != nil {
		return fail(err)
	}

	for _, o := range opts {
		o(&deps)
	}
	mx, running := wireMetrics(cfg, rc, queues, budget, &deps)
	w, err := dispatch.NewWorker(cfg, deps, tune)
	if err != nil {
		return fail(err)
	}
	return &Stack{Worker: w, Valkey: rc, Docker: dc, Registry: reg, Budget: budget, Holds: holds, Dollars: dollars, RateLimits: limits,
		Metrics: mx, metricsAddr: cfg.Gateway.MetricsAddr, consumers: running, report: report}, nil
}

// refusedPassword fails boot when Valkey refuses the password: unlike an
// outage, waiting cannot mend it, and a worker that boots anyway fails every
// call for ever. Any other answer (Valkey down included) lets boot go on.
func refusedPassword(ctx context.Context, rc *redis.Client, rawURL string) error {
	pctx, cancel := context.WithTimeout(ctx, valkey.DialTimeout)
	defer cancel()
	if err := rc.Ping(pctx).Err(); errors.Is(err, valkey.ErrAuthRefused) {
		return fmt.Errorf("valkey at %s: %w", dispatch.RedactURL(rawURL), err)
	}
	return nil
}

func keys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// newRegistry builds this host's registry row: its facts, and its beats
// reported to the observers. The image digest is read once at boot,
// bounded: the registry publishes it so doctor can tell hosts running
// different builds apart, and a missing PI_JOB_IMAGE is logged.
func newRegistry(ctx context.Context, rc *redis.Client, cfg dispatch.Config, tune dispatch.Tuning, runtime *runner.Docker, live *cronsync.LiveSet, tz string, deps *dispatch.Deps) (*registry.Registry, error) {
	digestCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	digest, err := runtime.ImageDigest(digestCtx, cfg.JobImage)
	cancel()
	if errors.Is(err, runner.ErrImageMissing) {
		// Said at boot, before any job is refused for it.
		tune.Logger.Warn("job_image_missing", "host", cfg.WorkerName, "image", cfg.JobImage,
			"fix", "build or pull it on this host (images are never pulled; pi-dispatch doctor names the command): until then every job is refused job-image-missing")
	}
	return registry.New(rc, cfg.WorkerName, registry.Facts{
		Image:       registry.Value(cfg.JobImage),
		ImageDigest: registry.Value(digest),
		Concurrency: registry.Value(cfg.Concurrency),
		Routes:      registry.Value(cfg.WorkerNameDeclared),
		Caps:        registry.Value(capabilities.Serialize(capabilities.Tokens(keys(cfg.SecretProfiles), keys(cfg.WaitProfiles)))),
		TZ:          registry.Value(tz),
		FPCron:      live.FPCron,
		CronCount:   live.CronCount,
	}, registry.Config{Version: tune.Version, Logger: tune.Logger, FleetKey: cfg.FleetKey, OnBeat: func(err error) {
		// Read when the Worker beats, long after the parts are wired.
		dispatch.Observers(deps.Observers).Observe(dispatch.Event{
			Kind: dispatch.EventBeat, At: time.Now(), Host: cfg.WorkerName, Service: "registry", Up: err == nil, Err: err,
		})
	}})
}

// cronBackground is the cron part of the worker: reconcile and watch the
// triggers file, or, with none, keep the stored schedulers' runs off this
// host. Schedulers live on this host's own queue when it has one (store),
// so hosts never prune each other's; the shared queue otherwise.
func cronBackground(cfg dispatch.Config, store *queue.Queue, reg *registry.Registry, live *cronsync.LiveSet, tz string, tune dispatch.Tuning, log *slog.Logger) dispatch.Background {
	if cfg.TriggersFile == "" {
		return &cronOff{store: store, queue: store.Name(), log: log}
	}
	return &cronPart{
		path:     cfg.TriggersFile,
		declared: cfg.WorkerNameDeclared,
		store:    store,
		peers:    reg,
		live:     live,
		opts:     cronsync.Options{Host: cfg.WorkerName, TZ: tz, Logger: tune.Logger},
		log:      log,
	}
}

// wireSpend adds the fleet's dollar windows, its rate-limit record and the
// model gateway to deps.
func wireSpend(cfg dispatch.Config, rc *redis.Client, tune dispatch.Tuning, deps *dispatch.Deps, report *report) (*fleetstate.Dollars, *fleetstate.RateLimits, error) {
	dollars := fleetstate.NewDollars(rc, fleetstate.DollarsConfig{
		DailyMicros: cfg.Spend.DailyCostMicros, WeeklyMicros: cfg.Spend.WeeklyCostMicros, MonthlyMicros: cfg.Spend.MonthlyCostMicros,
		Host: cfg.WorkerName, Logger: tune.Logger,
	})
	limits := fleetstate.NewRateLimits(rc, fleetstate.RateLimitsConfig{Host: cfg.WorkerName, Logger: tune.Logger})
	deps.Dollars, deps.RateLimits = dollars, limits
	gw, err := newGateway(cfg, report.limits(limits), tune.Logger, report.onCall)
	if err != nil {
		return nil, nil, err
	}
	if gw != nil {
		deps.Gateway = gw
	}
	return dollars, limits, nil
}

// newQueues builds the queues this host drains: the shared queue and, when
// the name is declared, the host's own. The host queue is declared now so
// the kill switch finds it even before its first job; it starts paused
// when the fleet is paused (pi:paused).
func newQueues(ctx context.Context, rc *redis.Client, cfg dispatch.Config, tune dispatch.Tuning, log *slog.Logger) ([]*queue.Queue, error) {
	qcfg := queue.Config{LockTTL: tune.LockTTL, WorkerName: cfg.WorkerName, Logger: log, Layout: queue.Layout(cfg.BullMQLayout)}
	shared, err := queue.New(rc, fleet.SharedQueue, qcfg)
	if err != nil {
		return nil, err
	}
	if !cfg.WorkerNameDeclared {
		return []*queue.Queue{shared}, nil
	}
	host, err := queue.New(rc, fleet.HostQueueName(cfg.WorkerName), qcfg)
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

// wireFleet adds the parts that reach across hosts: the directory of every
// queue, the run mirror (every host mirrors its records, so the fleet's
// runs are seen from anywhere) and, on a named host, the fleet leases.
func wireFleet(cfg dispatch.Config, rc *redis.Client, tune dispatch.Tuning, deps *dispatch.Deps) error {
	dir, err := queue.NewDirectory(rc, queue.Config{})
	if err != nil {
		return err
	}
	fleetDir := SigningDirectory(dir, cfg.FleetKey)
	deps.Directory = fleetDir
	deps.Finder = fleetDir // held-job liveness across every queue
	deps.Mirror = fleetstate.NewMirror(rc, fleetstate.MirrorConfig{RetentionDays: cfg.LogRetentionDays, Host: cfg.WorkerName, Logger: tune.Logger})
	if cfg.WorkerNameDeclared {
		deps.Leases = Leaser(lease.New(rc, cfg.WorkerName, lease.Config{Logger: tune.Logger}))
	}
	return nil
}
