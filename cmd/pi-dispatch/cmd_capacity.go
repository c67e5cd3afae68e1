package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/pidispatch/pidispatch/config"
	"github.com/pidispatch/pidispatch/operator"
	"github.com/pidispatch/pidispatch/registry"
)

func init() {
	register(command{name: "capacity", killSwitch: true, summary: "the fleet's slots, busy share, waiting jobs and drain time (--json)", help: capacityHelp, run: runCapacity})
}

const capacityUsage = "usage: pi-dispatch capacity [--json]"

func runCapacity(ctx context.Context, e env, args []string) int {
	fs := flag.NewFlagSet("capacity", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	asJSON := fs.Bool("json", false, "one JSON line")
	pos, code := parseFlags(e, fs, args, capacityUsage)
	if code >= 0 {
		return code
	}
	if len(pos) > 0 {
		fmt.Fprintf(e.stderr, "pi-dispatch capacity: unexpected argument %q (%s)\n", pos[0], capacityUsage)
		return exitUsage
	}
	key, code := fleetKeyFromEnv(e, "capacity")
	if code != exitOK {
		return code
	}
	cfg, _ := operator.ConfigForDoctor(e.getenv)
	unsigned := config.SplitQueues(e.getenv("PI_UNSIGNED_QUEUES"))
	client, url, code := ksConnect(e, "capacity")
	if code != exitOK {
		return code
	}
	defer client.Close()
	ctx, cancel := context.WithTimeout(ctx, ksCommandTimeout)
	defer cancel()
	rep, err := operator.Capacity(ctx, client, operator.CapacityOptions{LogsDir: cfg.LogsDir,
		Trust: func(hosts []registry.Host) []registry.Host { return registry.Trust(hosts, key, unsigned) }})
	if err != nil {
		return ksUnreachable(e.stderr, url, err)
	}
	if *asJSON {
		return writeJSONLine(e, "capacity", rep)
	}
	if err := printCapacity(e.stdout, rep); err != nil {
		return exitFailure
	}
	return exitOK
}

// printCapacity writes the hosts, the queues and the fleet's line.
func printCapacity(w io.Writer, rep operator.CapacityReport) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "HOST\tSLOTS\tBUSY\tSHARE\tWAITING\tENDED/H\tDRAIN")
	for _, h := range rep.Hosts {
		name := h.Name
		if h.Untrusted {
			name += " (untrusted)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%d\t%.1f\t%s\n", name, concurrency(h.Slots), h.Busy, percent(h.BusyShare),
			h.Waiting, h.PerHour, drainText(h.Waiting, h.DrainMs))
	}
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "QUEUE\tWAITING\tDELAYED\tACTIVE\tPAUSED")
	for _, q := range rep.Queues {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%s\n", q.Queue, q.Waiting, q.Delayed, q.Active, yesNo(q.Paused))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	window := time.Duration(rep.WindowMs) * time.Millisecond
	fmt.Fprintf(w, "fleet: %d slots, %d busy (%s), %d waiting, %d delayed; %d runs ended in the last %s (%.1f an hour); drain: %s\n",
		rep.Slots, rep.Busy, percent(rep.BusyShare), rep.Waiting, rep.Delayed, rep.Finished, window, rep.PerHour,
		drainText(rep.Waiting, rep.DrainMs))
	if rep.Unattributed > 0 {
		fmt.Fprintf(w, "note: %d running job(s) held by no live host\n", rep.Unattributed)
	}
	fmt.Fprintf(w, "runs read from: %s\n", rep.Runs)
	return nil
}

func percent(share float64) string { return fmt.Sprintf("%.0f%%", share*100) }

// drainText is a drain time for a person: "-" with nothing waiting, "no
// rate" when jobs wait and no run ended in the window.
func drainText(waiting int64, ms *int64) string {
	switch {
	case waiting == 0:
		return "-"
	case ms == nil:
		return "no rate"
	}
	return (time.Duration(*ms) * time.Millisecond).Round(time.Second).String()
}
