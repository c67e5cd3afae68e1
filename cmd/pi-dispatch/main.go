// Command pi-dispatch is the operator CLI of pidispatch: the fleet-wide kill
// switch (pause, resume, status), local runs, the host list, cancel, doctor,
// init, and a demo that runs one job end to end.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
