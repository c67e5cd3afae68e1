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
	"github.com/pidispatch/pidispatch/config"
	"github.com/pidispatch/pidispatch/cronsync"
	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/fleetstate"
	"github.com/pidispatch/pidispatch/internal/secretprofile"
	"github.com/pidispatch/pidispatch/observe/metrics"
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
	fleet       *Fleet
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
		_ = s.fleet.Close(ctx)
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
// the tests all boot workers through it. It first reads the policy files
// cfg names (cfg.Worker): a bad one is a *config.ConfigError, and nothing
// has been dialled. logger receives every event unless tune.Logger is set;
// tune.Now (default time.Now) is also the clock of the registry's beat
// events, the gateway and the transcript pruning; opts apply in order.
func Build(ctx context.Context, cfg config.Config, logger *slog.Logger, tune dispatch.Tuning, opts ...Option) (*Stack, error) {
	// The policy files are read and the whole configuration checked before
	// anything reaches Valkey or Docker.
	wcfg, err := cfg.Worker()
	if err != nil {
		return nil, err
	}
	rc, err := valkey.NewClient(cfg.ValkeyURL, valkey.Options{Password: cfg.ValkeyPassword})
	if err != nil {
		return nil, &config.ConfigError{Var: "VALKEY_URL", Value: config.RedactURL(cfg.ValkeyURL), Rule: err.Error()}
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
	// One clock: the Worker's (Tuning.Now) stamps the registry's beats and
	// dates the gateway's calls and the transcript pruning too.
	if tune.Now == nil {
		tune.Now = time.Now
	}
	log := tune.Logger.With("host", cfg.WorkerName)

	// Components that stamp the host themselves get the bare logger.
	runtime, err := runner.NewDocker(dc, runner.Config{
		Memory: cfg.JobMemory, CPUs: cfg.JobCPUs, Timeout: cfg.JobTimeout, OutputMax: cfg.JobOutputMax, Logger: tune.Logger,
	})
	if err != nil {
		return fail(err)
	}

	// Cron: the triggers file is read before anything reaches Valkey; a file
	// that does not parse refuses boot.
	own, err := readTriggers(cfg)
	if err != nil {
		return fail(err)
	}
	tz := registry.LocalZone(os.Getenv)
	live := cronsync.NewLiveSet(own, tz)

	deps := dispatch.Deps{Runtime: runtime, Secrets: secretprofile.Resolver{}, ModelSockets: modelSockets{}}
	fl := NewFleet(rc, FleetOptions{FleetKey: cfg.FleetKey, Layout: queue.Layout(cfg.BullMQLayout), RetentionDays: cfg.LogRetentionDays})
	st, err := openStores(ctx, fl, cfg, tune, runtime, live, tz, &deps)
	if err != nil {
		return fail(err)
	}
	failOpen := fail
	fail = func(err error) (*Stack, error) { _ = fl.Close(context.WithoutCancel(ctx)); return failOpen(err) }
	deps.Stores = st.stores
	deps.Cron = cronGate{live: live, peers: st.registry, host: cfg.WorkerName}
	deps.Background = append(deps.Background, cronBackground(cfg, st.queues[len(st.queues)-1], st.registry, live, tz, tune, log))

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
	if err := wireGateway(cfg, st.limits, tune, &deps, report); err != nil {
		return fail(err)
	}

	for _, o := range opts {
		o(&deps)
	}
	mx, running := wireMetrics(cfg, rc, st.queues, st.budget, &deps)
	w, err := dispatch.NewWorker(wcfg, deps, tune)
	if err != nil {
		return fail(err)
	}
	return &Stack{Worker: w, Valkey: rc, Docker: dc, Registry: st.registry, Budget: st.budget, Holds: st.holds, Dollars: st.dollars,
		RateLimits: st.limits, Metrics: mx, metricsAddr: cfg.Gateway.MetricsAddr, consumers: running, report: report, fleet: fl}, nil
}

// refusedPassword fails boot when Valkey refuses the password: unlike an
// outage, waiting cannot mend it, and a worker that boots anyway fails every
// call for ever. Any other answer (Valkey down included) lets boot go on.
func refusedPassword(ctx context.Context, rc *redis.Client, rawURL string) error {
	pctx, cancel := context.WithTimeout(ctx, valkey.DialTimeout)
	defer cancel()
	if err := rc.Ping(pctx).Err(); errors.Is(err, valkey.ErrAuthRefused) {
		return fmt.Errorf("valkey at %s: %w", config.RedactURL(rawURL), err)
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

// openStores opens this host's stores through fl: its queues, budgets,
// holds, leases, run mirror, cancels, rate limits and registry row, with the
// row's facts and its beats reported to the observers. The image digest is
// read once at boot, bounded: the registry publishes it so doctor can tell
// hosts running different builds apart, and a missing PI_JOB_IMAGE is
// logged.
func openStores(ctx context.Context, fl *Fleet, cfg config.Config, tune dispatch.Tuning, runtime *runner.Docker, live *cronsync.LiveSet, tz string, deps *dispatch.Deps) (*valkeyStores, error) {
	digestCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	digest, err := runtime.ImageDigest(digestCtx, cfg.JobImage)
	cancel()
	if errors.Is(err, runner.ErrImageMissing) {
		// Said at boot, before any job is refused for it.
		tune.Logger.Warn("job_image_missing", "host", cfg.WorkerName, "image", cfg.JobImage,
			"fix", "build or pull it on this host (images are never pulled; pi-dispatch doctor names the command): until then every job is refused job-image-missing")
	}
	return fl.open(ctx, dispatch.FleetHost{
		Name:     cfg.WorkerName,
		Declared: cfg.WorkerNameDeclared,
		Starts:   dispatch.StartCaps{Daily: cfg.DailyCap, Weekly: cfg.WeeklyCap, Monthly: cfg.Spend.MonthlyCap, SoftHoldPct: cfg.Spend.SoftHoldPct},
		Dollars:  dispatch.DollarCaps{Daily: cfg.Spend.DailyCostMicros, Weekly: cfg.Spend.WeeklyCostMicros, Monthly: cfg.Spend.MonthlyCostMicros},
		LockTTL:  tune.LockTTL,
		Logger:   tune.Logger,
		Row: dispatch.HostRow{
			Version:     tune.Version,
			Image:       cfg.JobImage,
			ImageDigest: digest,
			Concurrency: cfg.Concurrency,
			Caps:        capabilities.Serialize(capabilities.Tokens(keys(cfg.SecretProfiles), keys(cfg.WaitProfiles))),
			TZ:          tz,
			FPCron:      live.FPCron,
			CronCount:   live.CronCount,
			OnBeat: func(err error) {
				// Read when the Worker beats, long after the parts are wired.
				dispatch.Observers(deps.Observers).Observe(dispatch.Event{
					Kind: dispatch.EventBeat, At: tune.Now(), Host: cfg.WorkerName, Service: "registry", Up: err == nil, Err: err,
				})
			},
		},
	})
}

// cronBackground is the cron part of the worker: reconcile and watch the
// triggers file, or, with none, keep the stored schedulers' runs off this
// host. Schedulers live on this host's own queue when it has one (store),
// so hosts never prune each other's; the shared queue otherwise.
func cronBackground(cfg config.Config, store *queue.Queue, reg *registry.Registry, live *cronsync.LiveSet, tz string, tune dispatch.Tuning, log *slog.Logger) dispatch.Background {
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

// wireGateway adds the model gateway to deps, reporting to limits (the
// fleet's rate-limit record) and report.
func wireGateway(cfg config.Config, limits *fleetstate.RateLimits, tune dispatch.Tuning, deps *dispatch.Deps, report *report) error {
	gw, err := newGateway(cfg, report.limits(limits), tune.Logger, tune.Now, report.onCall)
	if err != nil {
		return err
	}
	if gw != nil {
		deps.Gateway = gw
	}
	return nil
}
