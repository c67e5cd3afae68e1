// Command embed-worker is a Go service that embeds a pidispatch worker: it
// owns its logger, its signals and its exit code, and builds the real worker
// (Valkey queues and fleet state, Docker containers, cron) with package stack.
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
	"syscall"

	"github.com/pidispatch/pidispatch/config"
	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/stack"
)

func main() {
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
	cfg, err := config.Load(getenv)
	if err != nil {
		return err
	}
	logger := slog.New(slog.NewJSONHandler(stderr, nil)).With("service", "embed-worker")
	s, err := stack.Build(ctx, cfg, logger, dispatch.Tuning{Version: "embed-worker"})
	if err != nil {
		return err
	}
	defer s.Close()
	return s.Worker.Run(ctx)
}
