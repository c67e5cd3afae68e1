// Package queuebench measures our queue (package queue) against BullMQ and
// asynq on one redis-server: throughput of no-op jobs at a fixed
// concurrency, pickup latency with an idle consumer, and how close ours
// comes to the server's own ceiling for script calls. cmd/queuebench runs it.
package queuebench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Systems compared, in report order.
const (
	SystemOurs    = "ours"
	SystemBullMQ  = "bullmq"  // BullMQ 5
	SystemBullMQ6 = "bullmq6" // BullMQ 6
	SystemAsynq   = "asynq"
)

// Defaults of Config.
const (
	DefaultJobs            = 20000
	DefaultConcurrency     = 16
	DefaultLatencyJobs     = 500
	DefaultSpacing         = 2 * time.Millisecond
	DefaultCeilingDuration = time.Second
	DefaultNodeDir         = "bullmq"
	DefaultNode6Dir        = "bullmq6"
	DefaultScript          = "bench.js"
	DefaultPhaseTimeout    = 2 * time.Minute
	DefaultRounds          = 1
)

// Config tunes Run. The zero value runs the full bench on a private server.
type Config struct {
	// ValkeyURL is the server to use. Its database must be empty; it is
	// flushed before and after each measurement. Empty (the default): start
	// a private redis-server on a free loopback port and stop it at the end.
	ValkeyURL string
	// Jobs is the number of no-op jobs each system drains. Default 20000.
	Jobs int
	// Concurrency is the number of jobs each system runs at once. Default 16.
	Concurrency int
	// LatencyJobs is the number of jobs added one at a time to an idle
	// consumer to measure pickup latency. Default 500.
	LatencyJobs int
	// Spacing is the pause between two latency jobs. Default 2ms.
	Spacing time.Duration
	// CeilingDuration is how long each measurement of the trivial EVALSHA
	// rate lasts (two per round: right before and right after ours).
	// Default 1s.
	CeilingDuration time.Duration
	// NodeDir holds BullMQ 5's node_modules. Default "bullmq" (run from
	// bench/).
	NodeDir string
	// Node6Dir holds BullMQ 6's node_modules. Default "bullmq6".
	Node6Dir string
	// Script is bench.js, run over either. Default "bench.js".
	Script string
	// Systems to measure; default all three. The ceiling is measured when
	// ours is.
	Systems []string
	// PhaseTimeout bounds each measurement. Default 2 minutes.
	PhaseTimeout time.Duration
	// Rounds is how many times each system's throughput is measured, the
	// systems taking turns, with the ceiling measured right before and
	// right after each of ours. On a shared machine the load drifts within
	// seconds, so each round compares figures taken close together; the
	// report gives the median round. Latency is measured in the first
	// round only. Default 1.
	Rounds int
	// AutoPipeline, an experiment: our handler slots complete and fetch
	// through go-redis's AutoPipeliner (an EXPERIMENTAL go-redis API), so
	// concurrent slots share round trips. Default off: a plain client.
	AutoPipeline bool
	// CPUProfile, when set, receives a CPU profile of this process while
	// our queue drains.
	CPUProfile io.Writer
	// Logger receives one event per finished measurement. Default discards.
	Logger *slog.Logger
}

func (c Config) withDefaults() (Config, error) {
	if c.Jobs == 0 {
		c.Jobs = DefaultJobs
	}
	if c.Concurrency == 0 {
		c.Concurrency = DefaultConcurrency
	}
	if c.LatencyJobs == 0 {
		c.LatencyJobs = DefaultLatencyJobs
	}
	if c.Spacing == 0 {
		c.Spacing = DefaultSpacing
	}
	if c.CeilingDuration == 0 {
		c.CeilingDuration = DefaultCeilingDuration
	}
	if c.NodeDir == "" {
		c.NodeDir = DefaultNodeDir
	}
	if c.Node6Dir == "" {
		c.Node6Dir = DefaultNode6Dir
	}
	if c.Script == "" {
		c.Script = DefaultScript
	}
	if len(c.Systems) == 0 {
		c.Systems = []string{SystemOurs, SystemBullMQ, SystemBullMQ6, SystemAsynq}
	}
	if c.PhaseTimeout == 0 {
		c.PhaseTimeout = DefaultPhaseTimeout
	}
	if c.Rounds == 0 {
		c.Rounds = DefaultRounds
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	switch {
	case c.Jobs < 0 || c.Jobs > 10_000_000:
		return c, errors.New("queuebench: Jobs must be within 1..10000000")
	case c.Concurrency < 0 || c.Concurrency > 1024:
		return c, errors.New("queuebench: Concurrency must be within 1..1024")
	case c.LatencyJobs < 0 || c.LatencyJobs > 100_000:
		return c, errors.New("queuebench: LatencyJobs must be within 1..100000")
	case c.Spacing < 0 || c.CeilingDuration < 0 || c.PhaseTimeout < 0:
		return c, errors.New("queuebench: negative duration")
	case c.Rounds < 0 || c.Rounds > 100:
		return c, errors.New("queuebench: Rounds must be within 1..100")
	}
	for _, s := range c.Systems {
		if s != SystemOurs && s != SystemBullMQ && s != SystemBullMQ6 && s != SystemAsynq {
			return c, fmt.Errorf("queuebench: unknown system %q (use %s, %s, %s, %s)", s, SystemOurs, SystemBullMQ, SystemBullMQ6, SystemAsynq)
		}
	}
	return c, nil
}

// Throughput is one system's drain of Jobs no-op jobs.
type Throughput struct {
	Jobs int
	// Enqueue is how long adding the jobs took (not part of JobsPerSec).
	Enqueue time.Duration
	// Drain runs from the first fetch (the consumer's start) to the last
	// completion the system acknowledged.
	Drain time.Duration
	// Server is the server's work during the drain.
	Server ServerWork
}

// JobsPerSec is Jobs over Drain.
func (t Throughput) JobsPerSec() float64 {
	if t.Drain <= 0 {
		return 0
	}
	return float64(t.Jobs) / t.Drain.Seconds()
}

// Result is one system's figures.
type Result struct {
	System string
	// Throughput is the median round's (by jobs/s); Rounds has every
	// round's, in order.
	Throughput Throughput
	Rounds     []Throughput
	Latency    Latency
}

// Ceiling is the server's rate for a trivial script call, and ours
// against it, in the median round (by Fraction); Rounds has every round's.
type Ceiling struct {
	CeilingRound
	Clients int
	Rounds  []CeilingRound
}

// CeilingRound is the ceiling of one round.
type CeilingRound struct {
	// EvalshaPerSec is the mean of the trivial EVALSHA rates measured
	// right before and right after ours drained; Before and After are
	// the two.
	EvalshaPerSec float64
	Before, After float64
	// CallsPerJob is the commands our worker's client sent per job while
	// draining (go-redis hook), Calls their breakdown.
	CallsPerJob float64
	Calls       map[string]int64
	// OursJobsPerSec is ours' throughput in this round.
	OursJobsPerSec float64
	// JobsPerSec is EvalshaPerSec / CallsPerJob; Fraction is ours over it.
	JobsPerSec float64
	Fraction   float64
	// PerCallFraction is ours over EvalshaPerSec itself: the share of the
	// ceiling at one script call per job (a job's own CompleteAndFetch,
	// were no call shared with other jobs).
	PerCallFraction float64
}

// OursDrain is what ours sent and spent while draining, in the round
// whose throughput is reported.
type OursDrain struct {
	// ClientCPU is the bench process's CPU time (the worker's client side).
	ClientCPU time.Duration
}

// Report is the outcome of Run.
type Report struct {
	Server        string // host:port
	Private       bool   // a redis-server started by the bench
	ServerVersion string
	Jobs          int
	Concurrency   int
	LatencyJobs   int
	Spacing       time.Duration
	Rounds        int
	Results       []Result
	Ceiling       *Ceiling   // nil unless ours was measured
	OursDrain     *OursDrain // nil unless ours was measured
}

// Result returns the named system's result, or nil.
func (r *Report) Result(system string) *Result {
	for i := range r.Results {
		if r.Results[i].System == system {
			return &r.Results[i]
		}
	}
	return nil
}

// Ratio is ours' throughput over peer's: the median of the rounds' ratios
// (each round's two drains ran seconds apart), and each round's. ok is
// false when either system was not measured.
func (r *Report) Ratio(peer string) (median float64, rounds []float64, ok bool) {
	ours, other := r.Result(SystemOurs), r.Result(peer)
	if ours == nil || other == nil || len(ours.Rounds) != len(other.Rounds) {
		return 0, nil, false
	}
	for i := range ours.Rounds {
		o := other.Rounds[i].JobsPerSec()
		if o == 0 {
			return 0, nil, false
		}
		rounds = append(rounds, ours.Rounds[i].JobsPerSec()/o)
	}
	if len(rounds) == 0 {
		return 0, nil, false
	}
	return medianOf(rounds), rounds, true
}

// medianOf is the median of xs (non-empty); the lower middle for an even
// count.
func medianOf(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[(len(s)-1)/2]
}

// medianIndex is the index in xs (non-empty) of its median value.
func medianIndex(xs []float64) int {
	m := medianOf(xs)
	return slices.Index(xs, m)
}

// Run measures each configured system in turn on one server (each in an
// empty database), cfg.Rounds times, and returns the report.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	for system, dir := range map[string]string{SystemBullMQ: cfg.NodeDir, SystemBullMQ6: cfg.Node6Dir} {
		if slices.Contains(cfg.Systems, system) {
			if err := checkBullMQ(dir); err != nil {
				return nil, err
			}
		}
	}
	rep := &Report{Jobs: cfg.Jobs, Concurrency: cfg.Concurrency, LatencyJobs: cfg.LatencyJobs, Spacing: cfg.Spacing, Rounds: cfg.Rounds}
	url := cfg.ValkeyURL
	if url == "" {
		srv, err := StartServer(ctx)
		if err != nil {
			return nil, err
		}
		defer srv.Close()
		url, rep.Private = srv.URL(), true
	}
	admin, err := newClient(url, 2)
	if err != nil {
		return nil, fmt.Errorf("valkey URL: %w", err)
	}
	defer admin.Close()
	rep.Server = admin.Options().Addr
	if rep.ServerVersion, err = serverVersion(ctx, admin); err != nil {
		return nil, err
	}
	if n, err := admin.DBSize(ctx).Result(); err != nil {
		return nil, fmt.Errorf("dbsize: %w", err)
	} else if n != 0 {
		return nil, fmt.Errorf("queuebench: database %d of %s holds %d keys; give an empty one (it is flushed between runs)", admin.Options().DB, rep.Server, n)
	}
	flush := func() error {
		if err := admin.FlushDB(ctx).Err(); err != nil {
			return fmt.Errorf("flushdb: %w", err)
		}
		return nil
	}
	// measure runs one phase in an empty database and leaves it empty.
	measure := func(system, phase string, fn func() error) error {
		if err := flush(); err != nil {
			return err
		}
		start := time.Now()
		if err := fn(); err != nil {
			return fmt.Errorf("%s %s: %w", system, phase, err)
		}
		cfg.Logger.Info("bench_phase_done", "system", system, "phase", phase, "took", time.Since(start).Round(time.Millisecond))
		return flush()
	}
	ceiling := func() (float64, error) {
		var rate float64
		err := measure("server", "ceiling", func() (err error) {
			rate, err = evalshaRate(ctx, url, cfg.Concurrency, cfg.CeilingDuration)
			return err
		})
		return rate, err
	}

	results := make([]Result, len(cfg.Systems))
	var ceilings []CeilingRound
	var clientCPU []time.Duration
	for round := 1; round <= cfg.Rounds; round++ {
		for i, system := range cfg.Systems {
			res := &results[i]
			res.System = system
			var tp Throughput
			var oursRound ourResult
			var fn func() error
			switch system {
			case SystemOurs:
				fn = func() (err error) {
					profile := cfg.CPUProfile
					if round > 1 {
						profile = nil // one profile per file
					}
					oursRound, err = oursThroughput(ctx, url, cfg, profile)
					tp = oursRound.Throughput
					return err
				}
			case SystemBullMQ:
				fn = func() (err error) { tp, err = bullmqThroughput(ctx, url, cfg, cfg.NodeDir); return err }
			case SystemBullMQ6:
				fn = func() (err error) { tp, err = bullmqThroughput(ctx, url, cfg, cfg.Node6Dir); return err }
			case SystemAsynq:
				fn = func() (err error) { tp, err = asynqThroughput(ctx, url, cfg); return err }
			}
			var before float64
			if system == SystemOurs {
				if before, err = ceiling(); err != nil {
					return rep, err
				}
			}
			if err := measure(system, "throughput", fn); err != nil {
				return rep, err
			}
			res.Rounds = append(res.Rounds, tp)
			if system == SystemOurs {
				after, err := ceiling()
				if err != nil {
					return rep, err
				}
				ceilings = append(ceilings, ceilingRound(before, after, oursRound))
				clientCPU = append(clientCPU, oursRound.ClientCPU)
			}
			cfg.Logger.Info("bench_round_done", "system", system, "round", round, "jobs_per_sec", int(tp.JobsPerSec()))
			if round > 1 {
				continue
			}
			var lat func() ([]time.Duration, error)
			switch system {
			case SystemOurs:
				lat = func() ([]time.Duration, error) { return oursLatency(ctx, url, cfg) }
			case SystemBullMQ:
				lat = func() ([]time.Duration, error) { return bullmqLatency(ctx, url, cfg, cfg.NodeDir) }
			case SystemBullMQ6:
				lat = func() ([]time.Duration, error) { return bullmqLatency(ctx, url, cfg, cfg.Node6Dir) }
			case SystemAsynq:
				lat = func() ([]time.Duration, error) { return asynqLatency(ctx, url, cfg) }
			}
			err := measure(system, "latency", func() error {
				samples, err := lat()
				res.Latency = summarize(samples)
				return err
			})
			if err != nil {
				return rep, err
			}
		}
	}
	for i := range results {
		res := &results[i]
		rates := make([]float64, len(res.Rounds))
		for j, t := range res.Rounds {
			rates[j] = t.JobsPerSec()
		}
		mi := medianIndex(rates)
		res.Throughput = res.Rounds[mi]
		if res.System == SystemOurs {
			rep.OursDrain = &OursDrain{ClientCPU: clientCPU[mi]}
		}
		cfg.Logger.Info("bench_system_done", "system", res.System,
			"jobs_per_sec", int(res.Throughput.JobsPerSec()), "p50", res.Latency.P50, "p99", res.Latency.P99)
	}
	rep.Results = results
	if len(ceilings) > 0 {
		fractions := make([]float64, len(ceilings))
		for j, c := range ceilings {
			fractions[j] = c.Fraction
		}
		rep.Ceiling = &Ceiling{CeilingRound: ceilings[medianIndex(fractions)], Clients: cfg.Concurrency, Rounds: ceilings}
	}
	return rep, nil
}

// ceilingRound puts one round's ceiling together from the EVALSHA rates
// measured before and after ours drained.
func ceilingRound(before, after float64, ours ourResult) CeilingRound {
	c := CeilingRound{Before: before, After: after, EvalshaPerSec: (before + after) / 2,
		Calls: ours.Calls, OursJobsPerSec: ours.JobsPerSec()}
	if ours.Jobs > 0 {
		c.CallsPerJob = float64(sum(ours.Calls)) / float64(ours.Jobs)
	}
	if c.CallsPerJob > 0 && c.EvalshaPerSec > 0 {
		c.JobsPerSec = c.EvalshaPerSec / c.CallsPerJob
		c.Fraction = c.OursJobsPerSec / c.JobsPerSec
		c.PerCallFraction = c.OursJobsPerSec / c.EvalshaPerSec
	}
	return c
}

// serverVersion reads "redis 7.0.15" or "valkey 8.1.0" from INFO server.
func serverVersion(ctx context.Context, c *redis.Client) (string, error) {
	raw, err := c.Info(ctx, "server").Result()
	if err != nil {
		return "", fmt.Errorf("info server: %w", err)
	}
	version := ""
	for line := range strings.SplitSeq(raw, "\n") {
		k, v, _ := strings.Cut(strings.TrimSpace(line), ":")
		switch k {
		case "valkey_version":
			return "valkey " + v, nil
		case "redis_version":
			version = "redis " + v
		}
	}
	return version, nil
}
