package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/redis/go-redis/v9"

	"github.com/pidispatch/pidispatch/config"
	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/internal/buildinfo"
	"github.com/pidispatch/pidispatch/internal/envfile"
	"github.com/pidispatch/pidispatch/registry"
	wiring "github.com/pidispatch/pidispatch/stack"
	"github.com/pidispatch/pidispatch/valkey"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

// Exit codes.
const (
	exitOK      = 0
	exitFailure = 1
	exitConfig  = 2 // refused boot: invalid configuration, a password Valkey refuses, or a name in use
)

// run boots the worker from the environment and runs it until ctx ends.
// Arguments only ask for the usage text or the version: any other refuses
// boot before anything is read or connected.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	if boot, code := parseArgs(args, stdout, stderr); !boot {
		return code
	}
	layered, cfg, unknown, code := loadConfig(getenv, stderr)
	if code != exitOK {
		return code
	}
	logger := slog.New(slog.NewJSONHandler(stderr, nil))
	warnUnknownVars(logger.With("host", cfg.WorkerName), unknown)
	redis.SetLogger(newRedisLog(logger.With("host", cfg.WorkerName)))
	opts, code := forgeOptions(ctx, layered, cfg, logger, stderr)
	if code != exitOK {
		return code
	}
	s, err := buildStack(ctx, cfg, logger, dispatch.Tuning{Version: buildinfo.Version(version)}, opts...)
	if err != nil {
		return buildFailed(stderr, err)
	}
	defer s.Shutdown(ctx)
	stopMetrics, err := startMetrics(ctx, s, logger.With("host", cfg.WorkerName))
	if err != nil {
		fmt.Fprintf(stderr, "worker: refused boot (nothing started): %v\n", err)
		return exitConfig
	}
	defer stopMetrics()
	reportDown(ctx, logger.With("host", cfg.WorkerName), cfg, s.Valkey, s.Docker)
	if err := s.Worker.Run(ctx); err != nil {
		return runFailed(stderr, err)
	}
	return exitOK
}

// loadConfig reads the configuration (the shell over the env file) and refuses boot before anything connects when it is invalid.
func loadConfig(getenv func(string) string, stderr io.Writer) (layered func(string) string, cfg config.Config, unknown []config.UnknownVar, code int) {
	vars, err := envfile.Load(getenv) // the rule every pi-dispatch command applies too
	if err != nil {
		fmt.Fprintf(stderr, "worker: %v (nothing started)\n", err)
		return nil, cfg, nil, exitConfig
	}
	cfg, err = config.Load(vars.Getenv)
	if err != nil {
		fmt.Fprintf(stderr, "worker: invalid configuration (nothing started):\n%v\n", err)
		return nil, cfg, nil, exitConfig
	}
	// Checked before anything connects: without a place for its records the
	// worker would spend money it cannot account for.
	if err := dispatch.PrepareLogsDir(cfg.LogsDir); err != nil {
		fmt.Fprintf(stderr, "worker: refused boot (nothing started): %v\n", err)
		return nil, cfg, nil, exitConfig
	}
	return vars.Getenv, cfg, config.UnknownVars(vars.Names(os.Environ())), exitOK
}

// warnUnknownVars logs each variable of the env file or the environment that
// looks like a setting but that nothing reads: a misspelt one is said, with
// the known name it is closest to, never silently ignored.
func warnUnknownVars(log *slog.Logger, unknown []config.UnknownVar) {
	for _, u := range unknown {
		log.Warn("config_unknown_variable", "name", u.Name, "closest", u.Closest, "fix", u.String())
	}
}

// forgeOptions wires the forge workspaces the environment configures, governed by this host's triggers file.
func forgeOptions(ctx context.Context, getenv func(string) string, cfg config.Config, logger *slog.Logger, stderr io.Writer) ([]wiring.Option, int) {
	// The forge triggers of this host's own triggers file decide what its
	// forge jobs may publish; a file whose forge triggers do not parse
	// refuses boot, as one whose cron triggers do not.
	var policies *wiring.ForgePolicies
	if cfg.TriggersFile != "" {
		var err error
		if policies, err = wiring.LoadForgePolicies(cfg.TriggersFile, cfg.WorkerName, logger); err != nil {
			fmt.Fprintf(stderr, "worker: refused boot (nothing started): %v\n", err)
			return nil, exitConfig
		}
	}
	forge, err := wiring.ForgeWorkspacesFromEnv(getenv, cfg.WorkerName, logger, policies)
	if err != nil {
		fmt.Fprintf(stderr, "worker: invalid configuration (nothing started):\n%v\n", err)
		return nil, exitConfig
	}
	if err := wiring.CheckForgeCredentials(policies, forge); err != nil {
		fmt.Fprintf(stderr, "worker: invalid configuration (nothing started):\n%v\n", err)
		return nil, exitConfig
	}
	if forge == nil {
		return nil, exitOK
	}
	// Forge jobs run host git: one too old to honour the environment
	// publish sets refuses boot here rather than at the first forge job.
	if err := wiring.CheckForgeGit(ctx, forge); err != nil {
		fmt.Fprintf(stderr, "worker: invalid configuration (nothing started):\n%v\n", err)
		return nil, exitConfig
	}
	opts := []wiring.Option{wiring.WithForgeWorkspaces(forge)}
	if policies != nil {
		opts = append(opts, wiring.WithForgePolicies(policies))
	}
	return opts, exitOK
}

// buildFailed reports a stack that could not be built; a bad configuration or a refused password exits 2, since a restart cannot fix it.
func buildFailed(stderr io.Writer, err error) int {
	fmt.Fprintf(stderr, "worker: %v\n", err)
	var ce *config.ConfigError
	var ces config.ConfigErrors
	if errors.As(err, &ce) || errors.As(err, &ces) || errors.Is(err, valkey.ErrAuthRefused) {
		return exitConfig
	}
	return exitFailure
}

// runFailed reports a worker that ended in error; a name in use or a bad configuration exits 2, since a restart cannot fix it.
func runFailed(stderr io.Writer, err error) int {
	fmt.Fprintf(stderr, "worker: boot refused: %v\n", err)
	var ce *config.ConfigError
	if errors.Is(err, registry.ErrNameInUse) || errors.As(err, &ce) {
		return exitConfig
	}
	return exitFailure
}

// buildStack and stack keep the tests' names for the shared wiring.
type stack = wiring.Stack

func buildStack(ctx context.Context, cfg config.Config, logger *slog.Logger, tune dispatch.Tuning, opts ...wiring.Option) (*stack, error) {
	return wiring.Build(ctx, cfg, logger, tune, opts...)
}
