package fleetsim

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// Targets the fleet's scale is held to (docs/benchmarks.md).
const (
	// TargetValkeyCPU is Valkey's CPU share of one core at steady state
	// with TargetHosts simulated hosts.
	TargetValkeyCPU = 0.10
	TargetHosts     = 1000
	// TargetReadP99 is the Valkey time of a routing decision's and a cron
	// gate's registry read at p99.
	TargetReadP99 = time.Millisecond
)

// topCommands is how many commands each run lists.
const topCommands = 8

// WriteTable prints the report for a person: per fleet size, the server's
// load, the busiest commands, each operation's latency and the server's
// own time per call; then the growth across sizes.
func (r *Report) WriteTable(w io.Writer) error {
	for _, res := range r.Runs {
		if err := res.write(w); err != nil {
			return err
		}
	}
	if len(r.Runs) > 1 {
		return r.writeGrowth(w)
	}
	return nil
}

func (res Result) write(w io.Writer) error {
	fmt.Fprintf(w, "== %d hosts: window %s, load %s, %.1f deliveries/s, booted in %s\n",
		res.Hosts, res.Window.Round(time.Second), res.Load, res.Rate, res.BootTime.Round(time.Millisecond))
	fmt.Fprintf(w, "valkey cpu %.1f%% of one core; simulator cpu %.1f%%; %.0f commands/s; used_memory %s (%s per host); %d clients\n",
		100*res.ValkeyCPU, 100*res.ClientCPU, res.CommandsSec, mib(res.UsedMemory), kib(res.UsedMemory/int64(max(res.Hosts, 1))), res.Clients)
	var top []string
	for i, c := range res.Commands {
		if i == topCommands {
			break
		}
		top = append(top, fmt.Sprintf("%s %.0f/s (%.0f us, %.0f%%)", c.Command, c.PerSec, c.UsecPerCall, 100*c.Share))
	}
	fmt.Fprintf(w, "top commands (calls/s, server us per call, share of command time): %s\n\n", strings.Join(top, "; "))

	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "operation (client side)\tper s\tp50 ms\tp99 ms\tmax ms\terrors\t")
	for _, op := range opOrder {
		l, ok := res.Ops[op]
		if !ok {
			continue
		}
		fmt.Fprintf(tw, "%s\t%.2f\t%.3f\t%.3f\t%.3f\t%d\t\n", op, l.PerSec, ms(l.P50), ms(l.P99), ms(l.Max), l.Errors)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(res.Server) > 0 {
		fmt.Fprintln(w)
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "valkey time per call (slow log)\tcalls\tp50 ms\tp99 ms\tmax ms\t")
		for _, s := range res.Server {
			if !topLevel(s.Class) {
				continue // a command scripts run too: the JSON report has it
			}
			fmt.Fprintf(tw, "%s\t%d\t%.3f\t%.3f\t%.3f\t\n", s.Class, s.Count, ms(s.P50), ms(s.P99), ms(s.Max))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if p := res.Probe; p != nil {
		fmt.Fprintf(w, "\nregistry read alone (fleet stopped, %d rows, %d calls): valkey cpu %.3f ms per call; valkey time p50 %.3f ms, p99 %.3f ms, max %.3f ms; client p99 %.3f ms\n",
			p.Rows, p.Calls, ms(p.CPU), ms(p.P50), ms(p.P99), ms(p.Max), ms(p.Client))
	}
	if res.Note != "" {
		fmt.Fprintf(w, "note: %s\n", res.Note)
	}
	fmt.Fprintln(w)
	return nil
}

// writeGrowth prints the figures that grow with the fleet, one row per
// size, and where they stand against the targets.
func (r *Report) writeGrowth(w io.Writer) error {
	fmt.Fprintln(w, "== growth")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "hosts\tvalkey cpu %\tsimulator cpu %\tcommands/s\tused_memory\tregistry read alone: cpu ms\tp99 ms\tunder load: registry read p99 ms (valkey)\trouting read p99 ms (client)\tcron gate p99 ms (client)\tbeat p99 ms\tpickup p99 ms\tstatus p99 ms\tdashboard p99 ms\t")
	for _, res := range r.Runs {
		alone, aloneP99 := "-", "-"
		if p := res.Probe; p != nil {
			alone, aloneP99 = fmt.Sprintf("%.3f", ms(p.CPU)), fmt.Sprintf("%.3f", ms(p.P99))
		}
		fmt.Fprintf(tw, "%d\t%.1f\t%.1f\t%.0f\t%s\t%s\t%s\t%s\t%.3f\t%.3f\t%.1f\t%.1f\t%.1f\t%.1f\t\n", res.Hosts, 100*res.ValkeyCPU, 100*res.ClientCPU,
			res.CommandsSec, mib(res.UsedMemory), alone, aloneP99, res.registryReadServer(), ms(res.Ops[OpRouteRead].P99), ms(res.Ops[OpCronGate].P99),
			ms(res.Ops[OpBeat].P99), ms(res.Ops[OpPickup].P99), ms(res.Ops[OpStatus].P99), ms(res.Ops[OpDashboard].P99))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "targets at %d hosts: valkey under %.0f%% of one core; a routing decision's and a cron gate's read under %s of valkey time at p99\n",
		TargetHosts, 100*TargetValkeyCPU, TargetReadP99)
	return nil
}

// topLevel says whether a slow-log class is called by clients only: a
// script, or a command no script of ours runs. The slow log logs the
// commands inside scripts as well, so the others mix both.
func topLevel(class string) bool {
	switch class {
	case "bzpopmin", "scan", "client|unblock":
		return true
	}
	return strings.HasPrefix(class, "script")
}

// registryReadServer is the registry read script's p99 server time, "-"
// when the slow log was not read.
func (res Result) registryReadServer() string {
	for _, s := range res.Server {
		if strings.Contains(s.Class, classRegistryRead) {
			return fmt.Sprintf("%.3f", ms(s.P99))
		}
	}
	return "-"
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

func kib(b int64) string { return fmt.Sprintf("%.1f KiB", float64(b)/(1<<10)) }
