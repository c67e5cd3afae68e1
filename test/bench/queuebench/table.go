package queuebench

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// Targets the queue issue sets for ours.
const (
	TargetVsBullMQ     = 1.5
	TargetVsAsynq      = 1.0
	TargetCeilingShare = 0.5
	TargetPickupP99    = 5 * time.Millisecond
	targetMarkMet      = "met"
	targetMarkMissed   = "MISSED"
)

// WriteTable prints the report for a person: the table, the ratios to ours
// and the ceiling.
func (r *Report) WriteTable(w io.Writer) error {
	where := r.Server
	if r.Private {
		where = "private server " + where
	}
	p := &printer{w: w}
	p.f("queuebench: %d no-op jobs at concurrency %d; pickup latency over %d jobs added %v apart to an idle consumer\n",
		r.Jobs, r.Concurrency, r.LatencyJobs, r.Spacing)
	p.f("server: %s (%s)\n\n", r.ServerVersion, where)

	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "system\tjobs/s\tp50 ms\tp99 ms\tmax ms\tdrain s\tenqueue jobs/s\t")
	for _, res := range r.Results {
		t := res.Throughput
		enq := 0.0
		if t.Enqueue > 0 {
			enq = float64(t.Jobs) / t.Enqueue.Seconds()
		}
		fmt.Fprintf(tw, "%s\t%.0f\t%.2f\t%.2f\t%.2f\t%.2f\t%.0f\t\n", res.System, t.JobsPerSec(),
			ms(res.Latency.P50), ms(res.Latency.P99), ms(res.Latency.Max), t.Drain.Seconds(), enq)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if r.Rounds > 1 {
		p.f("\njobs/s and server work are the median round's; latency is from round 1. Each round, in turn:\n")
		for _, res := range r.Results {
			rates := make([]float64, len(res.Rounds))
			for i, t := range res.Rounds {
				rates[i] = t.JobsPerSec()
			}
			p.f("  %s jobs/s: %s\n", res.System, joinf(rates, "%.0f"))
		}
	}
	p.f("\n")
	if err := r.writeServerWork(w); err != nil {
		return err
	}
	p.f("\n")

	ours := r.Result(SystemOurs)
	if ours == nil {
		return p.err
	}
	for _, peer := range []struct {
		system string
		target float64
	}{{SystemBullMQ, TargetVsBullMQ}, {SystemBullMQ6, TargetVsBullMQ}, {SystemAsynq, TargetVsAsynq}} {
		ratio, rounds, ok := r.Ratio(peer.system)
		if !ok {
			continue
		}
		p.f("ours / %s throughput: %.2fx%s (target >= %.1fx: %s)\n", peer.system, ratio, roundsNote(rounds, "%.2fx"), peer.target, mark(ratio >= peer.target))
	}
	if c := r.Ceiling; c != nil && c.EvalshaPerSec > 0 {
		p.f("ceiling: EVALSHA 'return 1' from %d clients: %.0f calls/s (mean of %.0f right before and %.0f right after ours drained)\n",
			c.Clients, c.EvalshaPerSec, c.Before, c.After)
		p.f("         ours sends %.3f commands per job while draining (%s)\n", c.CallsPerJob, formatCounts(c.Calls))
		fractions := make([]float64, len(c.Rounds))
		perCall := make([]float64, len(c.Rounds))
		for i, cr := range c.Rounds {
			fractions[i], perCall[i] = cr.Fraction, cr.PerCallFraction
		}
		p.f("         -> at most %.0f jobs/s; ours = %.2f of it%s (target >= %.2f: %s)\n",
			c.JobsPerSec, c.Fraction, roundsNote(fractions, "%.2f"), TargetCeilingShare, mark(c.Fraction >= TargetCeilingShare))
		p.f("         at one script call per job: at most %.0f jobs/s; ours = %.2f of it%s\n",
			c.EvalshaPerSec, medianOf(perCall), roundsNote(perCall, "%.2f"))
	}
	p.f("ours pickup p99: %.2f ms (target <= %v: %s)\n", ms(ours.Latency.P99), TargetPickupP99, mark(ours.Latency.P99 <= TargetPickupP99))
	if d := r.OursDrain; d != nil && ours.Throughput.Drain > 0 {
		p.f("ours client side while draining: %.0f us CPU per job in this process (%.0f%% of one core)\n",
			perJob(d.ClientCPU, ours.Throughput.Jobs), 100*d.ClientCPU.Seconds()/ours.Throughput.Drain.Seconds())
	}
	return p.err
}

// writeServerWork prints the server's work per job during each drain.
func (r *Report) writeServerWork(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "server, per job:\tCPU us\tcommands\tin scripts us\tbusy %\t")
	for _, res := range r.Results {
		t := res.Throughput
		if t.Jobs == 0 || t.Drain <= 0 {
			continue
		}
		fmt.Fprintf(tw, "%s\t%.1f\t%.1f\t%.1f\t%.0f\t\n", res.System, perJob(t.Server.CPU, t.Jobs),
			float64(t.Server.Commands())/float64(t.Jobs), perJob(t.Server.ScriptTime(), t.Jobs),
			100*t.Server.CPU.Seconds()/t.Drain.Seconds())
	}
	return tw.Flush()
}

// roundsNote lists each round's value when there was more than one.
func roundsNote(xs []float64, format string) string {
	if len(xs) < 2 {
		return ""
	}
	return fmt.Sprintf(" (median of %d rounds: %s)", len(xs), joinf(xs, format))
}

// joinf formats each of xs and joins them with spaces.
func joinf(xs []float64, format string) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = fmt.Sprintf(format, x)
	}
	return strings.Join(parts, " ")
}

func perJob(d time.Duration, jobs int) float64 {
	if jobs == 0 {
		return 0
	}
	return float64(d) / float64(time.Microsecond) / float64(jobs)
}

func mark(met bool) string {
	if met {
		return targetMarkMet
	}
	return targetMarkMissed
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// printer remembers the first write error.
type printer struct {
	w   io.Writer
	err error
}

func (p *printer) f(format string, args ...any) {
	if p.err == nil {
		_, p.err = fmt.Fprintf(p.w, format, args...)
	}
}
