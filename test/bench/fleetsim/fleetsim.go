// Package fleetsim simulates a fleet of N hosts on one Valkey, with the
// real registry, lease, queue, fleetstate, enqueue, inbox, operator and
// dashboard code, on the product's own periods, and measures what the
// fleet costs the server: its CPU, commands per second by command, the
// latency of each operation and its memory. See test/bench/README.md.
package fleetsim

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/operator/dash"
	"github.com/pidispatch/pidispatch/queue"
	"github.com/pidispatch/pidispatch/registry"
	"github.com/pidispatch/pidispatch/test/bench/queuebench"
	"github.com/pidispatch/pidispatch/valkey"
)

// Defaults of Config.
const (
	DefaultDuration    = 60 * time.Second
	DefaultWarmup      = 20 * time.Second
	DefaultRate        = 2.0
	DefaultReceivers   = 2
	DefaultConcurrency = 2
	DefaultJobTime     = 5 * time.Second
	DefaultServerTimes = 5 * time.Second
	DefaultStatusEvery = 10 * time.Second
	DefaultProbeCalls  = 100
	// bootParallel bounds the hosts booting at once.
	bootParallel = 32
)

// Periods are how often each host and the operator act. The defaults are
// the product's own; only tests shorten them.
type Periods struct {
	Beat    time.Duration // registry.DefaultInterval
	Block   time.Duration // queue.DefaultBlockTimeout: an idle consumer's wait
	Stalled time.Duration // the worker's stalled check (dispatch.Tuning)
	Rehome  time.Duration // the worker's look for dead hosts (dispatch.Tuning)
	Cron    time.Duration // one cron run gated per host per minute
	Status  time.Duration // an operator's `pi-dispatch status`
	Dash    time.Duration // an open dashboard's poll (dash.DefaultRefresh)
}

// DefaultPeriods are the product's periods.
func DefaultPeriods() Periods {
	return Periods{
		Beat: registry.DefaultInterval, Block: queue.DefaultBlockTimeout, Stalled: 30 * time.Second,
		Rehome: time.Minute, Cron: time.Minute, Status: DefaultStatusEvery, Dash: dash.DefaultRefresh,
	}
}

// Config is one simulation: a run per fleet size.
type Config struct {
	// ValkeyURL is an empty database to use; "" starts a private
	// redis-server per fleet size.
	ValkeyURL string
	// Hosts are the fleet sizes, run one after the other.
	Hosts []int
	// Warmup is how long the fleet runs before the steady window: every
	// host has booted and its consumer waits.
	Warmup time.Duration
	// Duration is the steady window the figures are taken over.
	Duration time.Duration
	// ServerTimes is how long, after the window, every call is logged in
	// the slow log for the server's own time per call (0: skip).
	ServerTimes time.Duration
	// ProbeCalls is how many registry reads the probe makes once the
	// fleet has stopped (Probe).
	ProbeCalls int
	// Rate is the forge deliveries per second, spread over Receivers.
	Rate      float64
	Receivers int
	// Concurrency is each host's job slots; JobTime how long a job holds
	// one (the container, simulated by a sleep).
	Concurrency int
	JobTime     time.Duration
	Periods     Periods
	Logger      *slog.Logger
}

func (c Config) withDefaults() Config {
	if c.Warmup == 0 {
		c.Warmup = DefaultWarmup
	}
	if c.Duration == 0 {
		c.Duration = DefaultDuration
	}
	if c.Receivers == 0 {
		c.Receivers = DefaultReceivers
	}
	if c.Concurrency == 0 {
		c.Concurrency = DefaultConcurrency
	}
	if c.JobTime == 0 {
		c.JobTime = DefaultJobTime
	}
	if c.ProbeCalls == 0 {
		c.ProbeCalls = DefaultProbeCalls
	}
	if c.Periods == (Periods{}) {
		c.Periods = DefaultPeriods()
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// ErrBadConfig wraps every refusal of a Config.
var ErrBadConfig = errors.New("fleetsim: bad configuration")

func (c Config) validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", ErrBadConfig, fmt.Sprintf(format, a...))
	}
	if len(c.Hosts) == 0 {
		return bad("no fleet size: give -hosts, e.g. -hosts 10,100")
	}
	for _, n := range c.Hosts {
		if n < 1 {
			return bad("fleet size %d: each must be at least 1", n)
		}
	}
	p := c.Periods
	for name, d := range map[string]time.Duration{"beat": p.Beat, "block": p.Block, "stalled": p.Stalled,
		"rehome": p.Rehome, "cron": p.Cron, "status": p.Status, "dash": p.Dash} {
		if d <= 0 {
			return bad("period %s %s: must be positive", name, d)
		}
	}
	switch {
	case c.Duration < 0 || c.Warmup < 0 || c.ServerTimes < 0:
		return bad("negative duration, warm-up or server-times window")
	case c.Rate < 0:
		return bad("rate %g: must not be negative", c.Rate)
	case c.Receivers < 1:
		return bad("receivers %d: at least 1", c.Receivers)
	case c.Concurrency < 1:
		return bad("concurrency %d: at least 1", c.Concurrency)
	case c.ProbeCalls < 1:
		return bad("probe calls %d: at least 1", c.ProbeCalls)
	}
	return nil
}

// Report is the simulation's result: one Run per fleet size.
type Report struct {
	Runs []Result `json:"runs"`
}

// Result is one fleet size's figures over the steady window.
type Result struct {
	Hosts    int           `json:"hosts"`
	Window   time.Duration `json:"window"`
	Load     string        `json:"loadAverage"` // 1, 5, 15 min at the window's end
	Rate     float64       `json:"rate"`
	BootTime time.Duration `json:"bootTime"`
	// ValkeyCPU is the server's CPU time over the window as a share of one
	// core (INFO cpu: used_cpu_sys + used_cpu_user).
	ValkeyCPU float64 `json:"valkeyCpu"`
	// ClientCPU is this process's (every simulated host's) CPU share: on a
	// machine of few cores it competes with the server.
	ClientCPU   float64       `json:"clientCpu"`
	CommandsSec float64       `json:"commandsPerSec"`
	Commands    []CommandRate `json:"commands"`
	// UsedMemory is INFO's used_memory at the window's end, Clients its
	// connected_clients.
	UsedMemory int64              `json:"usedMemory"`
	Clients    int64              `json:"clients"`
	Ops        map[string]Latency `json:"ops"`
	Server     []ServerTime       `json:"serverTimes,omitempty"`
	Probe      *Probe             `json:"probe,omitempty"`
	Logged     int                `json:"serverTimesLogged,omitempty"`
	Note       string             `json:"note,omitempty"`
}

// sim is one fleet size's simulation.
type sim struct {
	cfg      Config
	url      string
	key      fleet.Key
	rec      *recorder
	hook     *scriptHook
	bodies   *deliveries
	enqueued sync.Map // job id -> time.Time of its enqueue, until picked up
}

// Run simulates each fleet size of cfg in turn.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	rep := &Report{}
	for _, n := range cfg.Hosts {
		res, err := runSize(ctx, cfg, n)
		if err != nil {
			return rep, fmt.Errorf("%d hosts: %w", n, err)
		}
		rep.Runs = append(rep.Runs, res)
	}
	return rep, nil
}

// runSize runs one fleet size on its own database: a fresh private server,
// or the given one flushed before and after.
func runSize(ctx context.Context, cfg Config, n int) (Result, error) {
	url := cfg.ValkeyURL
	if url == "" {
		// Each host holds about five connections; the default 10,000 is too few.
		srv, err := queuebench.StartServerWith(ctx, queuebench.ServerOptions{Args: []string{"--maxclients", "50000"}})
		if err != nil {
			return Result{}, err
		}
		defer srv.Close()
		url = srv.URL()
	}
	// The bench's own client waits for a saturated server rather than fail.
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	admin, err := valkey.NewClient(url+sep+"dial_timeout=60s&read_timeout=60s&write_timeout=60s", valkey.Options{})
	if err != nil {
		return Result{}, err
	}
	defer admin.Close()
	// Its connection is made now, before the fleet may fill the server's
	// accept queue.
	if err := admin.Ping(ctx).Err(); err != nil {
		return Result{}, err
	}
	if cfg.ValkeyURL != "" {
		size, err := admin.DBSize(ctx).Result()
		if err != nil {
			return Result{}, err
		}
		if size != 0 {
			return Result{}, fmt.Errorf("%w: %s holds %d keys; give an empty database", ErrBadConfig, url, size)
		}
		defer admin.FlushDB(context.WithoutCancel(ctx))
	}
	keyBytes := make([]byte, 32)
	_, _ = rand.Read(keyBytes)
	key, err := fleet.NewKey(keyBytes)
	if err != nil {
		return Result{}, err
	}
	rec := newRecorder()
	bodies, err := newDeliveries()
	if err != nil {
		return Result{}, err
	}
	s := &sim{cfg: cfg, url: url, key: key, rec: rec, hook: newScriptHook(rec), bodies: bodies}
	return s.run(ctx, admin, n)
}

func (s *sim) run(ctx context.Context, admin *redis.Client, n int) (Result, error) {
	log := s.cfg.Logger.With("hosts", n)
	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var hosts []*host
	var recv []*receiver
	var op *operatorSide
	// Everything stops first, then what it used is closed.
	defer func() {
		stop()
		wg.Wait()
		if op != nil {
			op.close()
		}
		for _, r := range recv {
			r.close()
		}
		for _, h := range hosts {
			h.close()
		}
	}()

	start := time.Now()
	hosts, err := s.boot(runCtx, n)
	if err != nil {
		return Result{}, err
	}
	for _, h := range hosts {
		wg.Go(func() { h.run(runCtx) })
	}
	boot := time.Since(start)
	log.Info("fleetsim_booted", "took", boot.Round(time.Millisecond))

	spool, err := os.MkdirTemp("", "fleetsim-spool-")
	if err != nil {
		return Result{}, err
	}
	defer os.RemoveAll(spool)
	for i := range s.cfg.Receivers {
		r, err := s.openReceiver(fmt.Sprintf("receiver-%d", i), filepath.Join(spool, fmt.Sprint(i)))
		if err != nil {
			return Result{}, err
		}
		recv = append(recv, r)
		wg.Go(func() { _ = r.inbox.Run(withOp(runCtx, opInbox)) })
	}
	wg.Go(func() { s.deliver(runCtx, recv, s.cfg.Rate) })
	if op, err = s.openOperator(); err != nil {
		return Result{}, err
	}
	wg.Go(func() { every(runCtx, s.cfg.Periods.Status, op.status) })
	wg.Go(func() { every(runCtx, s.cfg.Periods.Dash, op.dashboard) })

	if err := sleep(ctx, s.cfg.Warmup); err != nil {
		return Result{}, err
	}
	res, err := s.measure(ctx, admin, n)
	if err != nil {
		return res, err
	}
	res.BootTime = boot
	// The probe reads the rows the fleet left, with the fleet stopped.
	stop()
	wg.Wait()
	probe, err := probeRead(ctx, admin, s.cfg.ProbeCalls)
	if err != nil {
		res.Note = strings.TrimPrefix(res.Note+"; probe: "+err.Error(), "; ")
	} else {
		res.Probe = &probe
	}
	log.Info("fleetsim_measured", "valkeyCpu", fmt.Sprintf("%.3f", res.ValkeyCPU), "commandsPerSec", int(res.CommandsSec))
	return res, nil
}

// boot opens n hosts, bootParallel at a time.
func (s *sim) boot(ctx context.Context, n int) ([]*host, error) {
	hosts := make([]*host, n)
	errs := make([]error, n)
	sem := make(chan struct{}, bootParallel)
	var wg sync.WaitGroup
	for i := range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			hosts[i], errs[i] = s.openHost(ctx, fmt.Sprintf("sim-%05d", i))
		})
	}
	wg.Wait()
	opened := hosts[:0]
	for _, h := range hosts {
		if h != nil {
			opened = append(opened, h)
		}
	}
	return opened, errors.Join(errs...)
}

// measure takes the steady window's figures, then the server's own time
// per call.
func (s *sim) measure(ctx context.Context, admin *redis.Client, n int) (Result, error) {
	before, err := readServer(ctx, admin)
	if err != nil {
		return Result{}, err
	}
	cpu0, t0 := processCPU(), time.Now()
	s.rec.start()
	if err := sleep(ctx, s.cfg.Duration); err != nil {
		return Result{}, err
	}
	samples, errs := s.rec.stop()
	after, err := readServer(ctx, admin)
	if err != nil {
		return Result{}, err
	}
	window := time.Since(t0)
	res := Result{
		Hosts: n, Window: window, Load: loadAverage(), Rate: s.cfg.Rate,
		ValkeyCPU:  (after.cpu - before.cpu).Seconds() / window.Seconds(),
		ClientCPU:  (processCPU() - cpu0).Seconds() / window.Seconds(),
		Commands:   commandRates(before, after, window),
		UsedMemory: after.memory,
		Clients:    after.clients,
		Ops:        map[string]Latency{},
	}
	for _, c := range res.Commands {
		res.CommandsSec += c.PerSec
	}
	for _, op := range opOrder {
		if len(samples[op]) > 0 || errs[op] > 0 {
			res.Ops[op] = summarize(samples[op], window, errs[op])
		}
	}
	if s.cfg.ServerTimes > 0 {
		st, logged, err := serverTimes(ctx, admin, s.hook, s.cfg.ServerTimes)
		if err != nil {
			res.Note = "server times: " + err.Error()
		}
		res.Server, res.Logged = st, logged
		if logged >= slowlogMaxLen {
			res.Note = "server times: the slow log filled; the newest calls only"
		}
	}
	return res, nil
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
