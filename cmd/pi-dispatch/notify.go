package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/pidispatch/pidispatch/observe/notify"
)

// notifyFleet tells PI_NOTIFY_URL that the fleet was paused or resumed:
// the worker's webhook hears of it from the machine that did it. A
// webhook that does not answer within a bounded retry is reported, and the
// command's outcome stands.
func notifyFleet(ctx context.Context, e env, verb string) {
	url := e.getenv("PI_NOTIFY_URL")
	if url == "" {
		return
	}
	host := e.getenv("PI_WORKER_NAME")
	if host == "" {
		host, _ = os.Hostname()
	}
	n, err := notify.New(notify.Config{URL: url, Host: host, Attempts: 4, BackoffMin: time.Second, BackoffMax: 5 * time.Second, PostTimeout: 10 * time.Second})
	if err != nil {
		fmt.Fprintf(e.stderr, "note: PI_NOTIFY_URL not told: %v\n", err)
		return
	}
	kind := notify.KindFleetPaused
	if verb == "resume" {
		kind = notify.KindFleetResumed
	}
	ctx, cancel := context.WithTimeout(ctx, 45*time.Second)
	defer cancel()
	if err := n.Send(ctx, notify.Event{Kind: kind}); err != nil {
		fmt.Fprintf(e.stderr, "note: PI_NOTIFY_URL not told: %v\n", err)
	}
}
