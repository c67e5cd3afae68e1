// Command pi-entrypoint is the agent image's entrypoint: it runs the job in
// /job/job.json as one headless pi run (see package agent/entrypoint), or,
// given arguments, runs them as a command.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/pidispatch/pidispatch/agent/entrypoint"
)

func main() {
	if len(os.Args) > 1 {
		err := entrypoint.Exec(os.Args[1:], os.Environ())
		fmt.Fprintln(os.Stderr, "pi-entrypoint:", err)
		os.Exit(127)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	code := entrypoint.Main(ctx, entrypoint.Options{Stdout: os.Stdout, Stderr: os.Stderr})
	stop()
	os.Exit(code)
}
