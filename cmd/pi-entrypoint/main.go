// Command pi-entrypoint is the agent image's entrypoint: it runs the job in
// /job/job.json as one headless pi run (see package agent/entrypoint).
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/pidispatch/pidispatch/agent/entrypoint"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	code := entrypoint.Main(ctx, entrypoint.Options{Stdout: os.Stdout, Stderr: os.Stderr})
	stop()
	os.Exit(code)
}
