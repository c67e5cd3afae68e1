// Command embed-worker is a Go service that embeds a pidispatch worker: it
// owns its logger and its shutdown, and wires the concrete stack (Valkey for
// the queues and fleet state, Docker for the job containers) from the public
// packages alone. It is what cmd/worker does, minus cron, in one screen.
//
//	VALKEY_URL=redis://127.0.0.1:6379/0 PI_JOB_IMAGE=pi-job:latest go run ./examples/embed-worker
//
// Every PI_* variable of docs/configuration.md applies; SIGINT or SIGTERM
// stops it (running jobs get a grace period, then their containers stop).
package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"syscall"
	"time"

	"github.com/moby/moby/client"

	"github.com/pidispatch/pidispatch/capabilities"
	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/fleetstate"
	"github.com/pidispatch/pidispatch/lease"
	"github.com/pidispatch/pidispatch/queue"
	"github.com/pidispatch/pidispatch/registry"
	"github.com/pidispatch/pidispatch/runner"
	"github.com/pidispatch/pidispatch/valkey"
)

func main() {
	// The service, not the library, owns signals and the exit code.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Getenv, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "embed-worker:", err)
		os.Exit(1)
	}
}

// run configures the worker from getenv, runs it until ctx ends and returns
// once it has shut down cleanly (nil) or refused to boot.
func run(ctx context.Context, getenv func(string) string, stderr io.Writer) error {
	cfg, err := dispatch.LoadConfig(getenv)
	if err != nil {
		return err
	}
	logger := slog.New(slog.NewJSONHandler(stderr, nil)).With("service", "embed-worker")
	w, closeAll, err := newWorker(cfg, logger)
	if err != nil {
		return err
	}
	defer closeAll()
	return w.Run(ctx)
}

// newWorker wires Valkey and Docker into a dispatch.Worker. closeAll releases
// the clients; call it after the worker's Run returned.
func newWorker(cfg dispatch.Config, logger *slog.Logger) (w *dispatch.Worker, closeAll func(), err error) {
	rc, err := valkey.NewClient(cfg.ValkeyURL, valkey.Options{Password: cfg.ValkeyPassword})
	if err != nil {
		return nil, nil, fmt.Errorf("VALKEY_URL: %w", err)
	}
	dc, err := client.New(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		_ = rc.Close()
		return nil, nil, fmt.Errorf("docker client: %w", err)
	}
	var budget *fleetstate.Budget
	closeAll = func() {
		if budget != nil {
			cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_ = budget.Close(cctx)
			cancel()
		}
		_ = rc.Close()
		_ = dc.Close()
	}
	defer func() {
		if err != nil {
			closeAll()
		}
	}()

	// Containers: one per job, never pulled, isolated by the runner.
	rt, err := runner.NewDocker(dc, runner.Config{Memory: cfg.JobMemory, CPUs: cfg.JobCPUs, Timeout: cfg.JobTimeout, Logger: logger})
	if err != nil {
		return nil, nil, err
	}

	// Queues: the shared one, plus this host's own when its name is declared.
	qcfg := queue.Config{WorkerName: cfg.WorkerName, Logger: logger.With("host", cfg.WorkerName)}
	names := []string{fleet.SharedQueue}
	if cfg.WorkerNameDeclared {
		names = append(names, fleet.HostQueueName(cfg.WorkerName))
	}
	var queues []*queue.Queue
	deps := dispatch.Deps{Runtime: rt}
	for _, name := range names {
		q, err := queue.New(rc, name, qcfg)
		if err != nil {
			return nil, nil, err
		}
		queues = append(queues, q)
		deps.Queues = append(deps.Queues, q)
	}
	consumer, err := queue.NewConsumer(queues, queue.ConsumerConfig{})
	if err != nil {
		return nil, nil, err
	}
	deps.Source = dispatch.SourceFromConsumer(consumer)

	// Spend caps, counted fleet-wide in Valkey.
	budget = fleetstate.NewBudget(rc, fleetstate.BudgetConfig{DailyCap: cfg.DailyCap, WeeklyCap: cfg.WeeklyCap, Host: cfg.WorkerName, Logger: logger})
	deps.Budget = budget

	// The host registry row: what peers and routing front-ends read.
	profiles := func(m map[string]string) []string {
		out := make([]string, 0, len(m))
		for k := range m {
			out = append(out, k)
		}
		slices.Sort(out)
		return out
	}
	caps := capabilities.Serialize(capabilities.Tokens(profiles(cfg.SecretProfiles), profiles(cfg.WaitProfiles)))
	reg, err := registry.New(rc, cfg.WorkerName, registry.Facts{
		Image:       registry.Value(cfg.JobImage),
		Concurrency: registry.Value(cfg.Concurrency),
		Routes:      registry.Value(cfg.WorkerNameDeclared),
		Caps:        registry.Value(caps),
	}, registry.Config{Version: "embed-worker", Logger: logger})
	if err != nil {
		return nil, nil, err
	}
	deps.Registry = reg
	if deps.Directory, err = queue.NewDirectory(rc, queue.Config{}); err != nil {
		return nil, nil, err
	}

	// A declared name turns on the fleet parts: leases and the run mirror.
	if cfg.WorkerNameDeclared {
		deps.Leases = lease.New(rc, cfg.WorkerName, lease.Config{Logger: logger})
		deps.Mirror = fleetstate.NewMirror(rc, fleetstate.MirrorConfig{RetentionDays: cfg.LogRetentionDays, Host: cfg.WorkerName, Logger: logger})
	}

	w, err = dispatch.NewWorker(cfg, deps, dispatch.Tuning{Version: "embed-worker", Logger: logger})
	if err != nil {
		return nil, nil, err
	}
	return w, closeAll, nil
}
