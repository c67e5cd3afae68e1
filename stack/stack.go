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
	if err := CheckTriggerFlows(cfg.TriggersFile, wcfg.Flows); err != nil {
		return nil, err
	}
	b := &builder{ctx: ctx, cfg: cfg, tune: clocked(tune, logger)}
	s, err := b.build(wcfg, opts)
	if err != nil {
		b.undo()
		return nil, err
	}
	return s, nil
}

// builder wires one Stack in order, remembering how to take back each part
// it made, so a failed build leaves nothing open.
type builder struct {
	ctx  context.Context
	cfg  config.Config
	tune dispatch.Tuning
	made []func() // undone last first when the build fails
}

// clocked gives the Tuning its logger and its one clock: the Worker's
// (Tuning.Now) also stamps the registry's beats and dates the gateway's calls
// and the transcript pruning.
func clocked(tune dispatch.Tuning, logger *slog.Logger) dispatch.Tuning {
	if tune.Logger == nil {
		tune.Logger = logger
	}
	if tune.Now == nil {
		tune.Now = time.Now
	}
	return tune
}

// undo takes back what the build made, last made first.
func (b *builder) undo() {
	for i := len(b.made) - 1; i >= 0; i-- {
		b.made[i]()
	}
}

// build makes the parts in boot order: the clients, the runtime, the
// triggers file (read before anything reaches Valkey), the fleet's stores,
// the report, the gateway, the caller's options, the metrics, the Worker.
func (b *builder) build(wcfg dispatch.Config, opts []Option) (*Stack, error) {
	s := &Stack{metricsAddr: b.cfg.Gateway.MetricsAddr}
	var err error
	if s.Valkey, err = b.valkey(); err != nil {
		return nil, err
	}
	if s.Docker, err = b.docker(); err != nil {
		return nil, err
	}
	// Components that stamp the host themselves get the bare logger.
	runtime, err := runner.NewDocker(s.Docker, runner.Config{
		Memory: b.cfg.JobMemory, CPUs: b.cfg.JobCPUs, Timeout: b.cfg.JobTimeout, OutputMax: b.cfg.JobOutputMax, Logger: b.tune.Logger,
	})
	if err != nil {
		return nil, err
	}
	deps := dispatch.Deps{Runtime: runtime, Secrets: secretprofile.Resolver{}, ModelSockets: modelSockets{}}
	st, err := b.stores(s, runtime, &deps)
	if err != nil {
		return nil, err
	}
	if err := b.reportAndGateway(s, st, &deps); err != nil {
		return nil, err
	}
	if !b.cfg.Spend.PredictOff {
		// Predicted admission reads the fleet's runs from the mirror.
		deps.Predictor = fleetstate.NewPredictor(st.mirror, fleetstate.PredictorConfig{MinRuns: b.cfg.Spend.PredictMinRuns, Now: b.tune.Now})
	}
	for _, o := range opts {
		o(&deps)
	}
	s.Metrics, s.consumers = wireMetrics(b.cfg, s.Valkey, st.queues, st.budget, &deps)
	if s.Worker, err = dispatch.NewWorker(wcfg, deps, b.tune); err != nil {
		return nil, err
	}
	s.Registry, s.Budget, s.Holds, s.Dollars, s.RateLimits = st.registry, st.budget, st.holds, st.dollars, st.limits
	return s, nil
}

// valkey dials the one Valkey client; a password Valkey refuses stops boot.
func (b *builder) valkey() (*redis.Client, error) {
	rc, err := valkey.NewClient(b.cfg.ValkeyURL, valkey.Options{Password: b.cfg.ValkeyPassword})
	if err != nil {
		return nil, &config.ConfigError{Var: "VALKEY_URL", Value: config.RedactURL(b.cfg.ValkeyURL), Rule: err.Error()}
	}
	b.made = append(b.made, func() { _ = rc.Close() })
	return rc, refusedPassword(b.ctx, rc, b.cfg.ValkeyURL)
}

// docker makes the Docker client (DOCKER_HOST and friends).
func (b *builder) docker() (*client.Client, error) {
	dc, err := client.New(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		return nil, fmt.Errorf("docker client: %w", err)
	}
	b.made = append(b.made, func() { _ = dc.Close() })
	return dc, nil
}

// stores reads the triggers file (a file that does not parse refuses boot,
// before anything reaches Valkey), then opens the fleet's stores through the
// Valkey driver and the cron gate and background on them.
func (b *builder) stores(s *Stack, runtime *runner.Docker, deps *dispatch.Deps) (*valkeyStores, error) {
	own, err := readTriggers(b.cfg)
	if err != nil {
		return nil, err
	}
	tz := registry.LocalZone(os.Getenv)
	live := cronsync.NewLiveSet(own, tz)
	s.fleet = NewFleet(s.Valkey, FleetOptions{FleetKey: b.cfg.FleetKey, Layout: queue.Layout(b.cfg.BullMQLayout),
		RetentionDays: b.cfg.LogRetentionDays, ThreadSettle: DefaultThreadSettle})
	st, err := openStores(b.ctx, s.fleet, b.cfg, b.tune, runtime, live, tz, deps)
	if err != nil {
		return nil, err
	}
	b.made = append(b.made, func() { _ = s.fleet.Close(context.WithoutCancel(b.ctx)) })
	deps.Stores = st.stores
	if b.cfg.SessionStore == config.SessionStoreValkey {
		deps.Sessions = fleetstate.NewSessions(s.Valkey, fleetstate.SessionsConfig{})
	}
	deps.Cron = cronGate{live: live, peers: st.registry, host: b.cfg.WorkerName}
	log := b.tune.Logger.With("host", b.cfg.WorkerName)
	deps.Background = append(deps.Background, cronBackground(b.cfg, st.queues[len(st.queues)-1], st.registry, live, tz, b.tune, log))
	return st, nil
}

// reportAndGateway wires the report (transcripts, notifications, tracing)
// and the model gateway.
func (b *builder) reportAndGateway(s *Stack, st *valkeyStores, deps *dispatch.Deps) error {
	report, err := newReport(b.ctx, b.cfg, s.Valkey, b.tune)
	if err != nil {
		return err
	}
	s.report = report
	b.made = append(b.made, func() {
		// The report's last write must happen though ctx may be what ended the build.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(b.ctx), 5*time.Second)
		defer cancel()
		_ = report.close(cctx)
	})
	report.wire(deps)
	return wireGateway(b.cfg, st.limits, b.tune, deps, report)
}

// DefaultThreadSettle is the settle window of the worker's forge threads:
// a delivery's job waits this long after its enqueue before it takes its
// thread, so a delivery received a moment before it, on another host, runs
// first.
const DefaultThreadSettle = 2 * time.Second

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
	if !cfg.FleetKey.IsSet() && len(cfg.UnsignedQueues) == 0 {
		// Said at boot, before any job is refused for it.
		tune.Logger.Warn("fleet_key_missing", "host", cfg.WorkerName,
			"fix", "set PI_FLEET_KEY_FILE (pi-dispatch init writes one; the same file on every host): until then every job but a cron run is refused job-unsigned, or opt in with PI_UNSIGNED_QUEUES")
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
