// Command worker drains this host's pidispatch queues: one Docker container
// per job, every gate checked before anything is spent. Configuration comes
// from the environment (docs/configuration.md); a bad value refuses boot with
// exit code 2 naming the variable. `worker --help` says which variables matter.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
	_ "time/tzdata" // pause windows and cron zones work in minimal images
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
