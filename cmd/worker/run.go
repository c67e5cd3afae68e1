package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"

	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/internal/envfile"
	wiring "github.com/pidispatch/pidispatch/internal/stack"
	"github.com/pidispatch/pidispatch/registry"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

// Exit codes.
const (
	exitOK      = 0
	exitFailure = 1
	exitConfig  = 2 // refused boot: invalid configuration or a name in use
)

// run boots the worker from the environment and runs it until ctx ends.
func run(ctx context.Context, getenv func(string) string, stderr io.Writer) int {
	layered, err := envfile.Load(getenv) // the rule every pi-dispatch command applies too
	if err != nil {
		fmt.Fprintf(stderr, "worker: %v (nothing started)\n", err)
		return exitConfig
	}
	cfg, err := dispatch.LoadConfig(layered.Getenv)
	if err != nil {
		fmt.Fprintf(stderr, "worker: invalid configuration (nothing started):\n%v\n", err)
		return exitConfig
	}
	logger := slog.New(slog.NewJSONHandler(stderr, nil))
	s, err := buildStack(ctx, cfg, logger, dispatch.Tuning{Version: version})
	if err != nil {
		fmt.Fprintf(stderr, "worker: %v\n", err)
		var ce *dispatch.ConfigError
		var ces dispatch.ConfigErrors
		if errors.As(err, &ce) || errors.As(err, &ces) {
			return exitConfig
		}
		return exitFailure
	}
	defer s.Close()
	if err := s.Worker.Run(ctx); err != nil {
		fmt.Fprintf(stderr, "worker: boot refused: %v\n", err)
		if errors.Is(err, registry.ErrNameInUse) {
			return exitConfig
		}
		return exitFailure
	}
	return exitOK
}

// buildStack and stack keep the tests' names for the shared wiring.
type stack = wiring.Stack

func buildStack(ctx context.Context, cfg dispatch.Config, logger *slog.Logger, tune dispatch.Tuning) (*stack, error) {
	return wiring.Build(ctx, cfg, logger, tune)
}
