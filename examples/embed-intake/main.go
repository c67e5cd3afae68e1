// Command embed-intake is a Go service that embeds the forge intake: the
// webhook receiver and the GitHub poller of `pi-dispatch receive`, built by
// package stack from the same variables, under the service's own logger,
// signals and exit code.
//
//	VALKEY_URL=redis://127.0.0.1:6379/0 PI_TRIGGERS_FILE=triggers.json \
//	  PI_FLEET_KEY_FILE=/srv/pi/fleet.key \
//	  WEBHOOK_SECRET=s3cret GITHUB_PAT=ghp_... go run ./examples/embed-intake
//
// Every variable of docs/forges.md applies; SIGINT or SIGTERM stops it.
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
	"github.com/pidispatch/pidispatch/stack"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Getenv, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "embed-intake:", err)
		os.Exit(1)
	}
}

// run configures the intake from getenv and serves it until ctx ends.
func run(ctx context.Context, getenv func(string) string, stderr io.Writer) error {
	cfg, err := config.Load(getenv)
	if err != nil {
		return err
	}
	fc, err := config.LoadForge(getenv)
	if err != nil {
		return err
	}
	logger := slog.New(slog.NewJSONHandler(stderr, nil)).With("service", "embed-intake")
	intake, err := stack.BuildIntake(ctx, cfg, fc, logger)
	if err != nil {
		return err
	}
	defer intake.Close()
	return intake.Run(ctx)
}
