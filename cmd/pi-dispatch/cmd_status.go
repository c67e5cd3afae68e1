package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/pidispatch/pidispatch/operator"
)

const statusUsage = `usage: pi-dispatch status [--per-queue] [--json]

Prints the fleet's pause state and its job counts: a table (one row per queue
with --per-queue, then the total), or one JSON line with --json. Finished jobs
are counted by outcome: completed (the run succeeded), refused (a gate or the
agent refused, or it timed out), cancelled (an operator's cancel) and failed.
WAITING counts the jobs ready to run, those that arrived during a pause
included. --json also lists the pull requests of the newest forge runs
(pullRequests).
`

func runStatus(ctx context.Context, e env, args []string) int {
	asJSON, perQueue := false, false
	for _, a := range args {
		switch a {
		case "--json", "-json":
			asJSON = true
		case "--per-queue", "-per-queue":
			perQueue = true
		case "-h", "--help":
			fmt.Fprint(e.stdout, statusUsage)
			return exitOK
		default:
			fmt.Fprintf(e.stderr, "pi-dispatch status: unexpected argument %q (usage: pi-dispatch status [--per-queue] [--json])\n", a)
			return exitUsage
		}
	}
	client, url, code := ksConnect(e, "status")
	if code != exitOK {
		return code
	}
	defer client.Close()
	ctx, cancel := context.WithTimeout(ctx, ksCommandTimeout)
	defer cancel()
	set, err := operator.FleetQueues(ctx, client)
	if err != nil {
		return ksUnreachable(e.stderr, url, err)
	}
	rep, err := operator.StatusPerQueue(ctx, client, set)
	if err != nil {
		if isReply(err) {
			fmt.Fprintf(e.stderr, "could not read the status of every queue at %s\n  %v\n", url, err)
			return exitFailure
		}
		return ksUnreachable(e.stderr, url, err)
	}
	if !perQueue {
		rep.PerQueue = nil
	}
	// The caps are this host's configuration (a broken one reads as the
	// defaults: status never refuses over it); the counts are the fleet's.
	// Every window is shown, with its use, its cap and its reset: a full
	// window refuses every job, and status must say so.
	cfg, _ := operator.ConfigForDoctor(e.getenv)
	if spend, err := operator.Spend(ctx, client, cfg); err == nil {
		rep.Spend = &spend
	}
	if asJSON {
		// Where the agent's work is: the newest runs' pull requests.
		if prs, err := operator.RecentPullRequests(ctx, client, 20); err == nil {
			rep.PullRequests = prs
		}
		return writeJSONLine(e, "status", rep)
	}
	if err := printStatus(e.stdout, rep); err != nil {
		return exitFailure
	}
	return exitOK
}

// printStatus writes the human status: the pause state, the counts table,
// and a note per degraded read.
func printStatus(w io.Writer, rep operator.StatusReport) error {
	flag := ""
	if rep.PauseFlag {
		flag = ", fleet pause flag set"
	}
	switch {
	case rep.PausedState:
		fmt.Fprintf(w, "fleet: paused (%s%s); `pi-dispatch resume` to resume\n", pluralQueues(rep.Queues), flag)
	case rep.PausedPartial:
		fmt.Fprintf(w, "fleet: PARTLY PAUSED (%d of %s paused: %s%s); run `pi-dispatch pause` or `resume` to make it whole\n",
			len(rep.PausedQueues), pluralQueues(rep.Queues), strings.Join(rep.PausedQueues, ", "), flag)
	default:
		fmt.Fprintf(w, "fleet: running (%s%s)\n", pluralQueues(rep.Queues), flag)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "QUEUE\tPAUSED\tWAITING\tDELAYED\tPRIORITIZED\tACTIVE\tCOMPLETED\tREFUSED\tCANCELLED\tFAILED")
	for _, q := range rep.PerQueue {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\n", q.Queue, yesNo(q.PausedState),
			q.Waiting+q.Paused, q.Delayed, q.Prioritized, q.Active, q.Completed, q.Refused, q.Cancelled, q.Failed)
	}
	paused := "no"
	switch {
	case rep.PausedState:
		paused = "yes"
	case rep.PausedPartial:
		paused = "partly"
	}
	fmt.Fprintf(tw, "total\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\n", paused,
		rep.Waiting+rep.Paused, rep.Delayed, rep.Prioritized, rep.Active, rep.Completed, rep.Refused, rep.Cancelled, rep.Failed)
	if err := tw.Flush(); err != nil {
		return err
	}
	if rep.Held > 0 {
		fmt.Fprintf(w, "held: %d job(s) waiting on their wait-for conditions\n", rep.Held)
	}
	if rep.Spend != nil {
		printSpend(w, *rep.Spend)
	}
	if rep.Fleet != "" {
		fmt.Fprintf(w, "note: registry unreadable, queues found from the keyspace: %s\n", rep.Fleet)
	}
	if rep.Discovery != "" {
		fmt.Fprintf(w, "note: queue discovery incomplete, counts may miss a queue: %s\n", rep.Discovery)
	}
	return nil
}

// printSpend writes the spend windows and the rate-limited providers.
func printSpend(w io.Writer, s operator.SpendReport) {
	for _, x := range s.Starts {
		if x.Cap <= 0 {
			continue
		}
		full := ""
		if x.Count >= x.Cap {
			full = " FULL: new jobs are refused over-budget until the reset"
		}
		fmt.Fprintf(w, "container starts %s: %d/%d (resets %s)%s\n", x.Window, x.Count, x.Cap, x.ResetsAt.UTC().Format("2006-01-02 15:04Z"), full)
	}
	for _, d := range s.Dollars {
		fmt.Fprintf(w, "dollars %s: $%.2f spent + $%.2f reserved of $%.2f (resets %s)\n",
			d.Window, d.Spent, d.Reserved, d.Cap, d.ResetsAt.UTC().Format("2006-01-02 15:04Z"))
	}
	for _, r := range s.Suspended {
		fmt.Fprintf(w, "rate-limited: %s until %s (%s); its new jobs wait for the reset\n",
			r.Provider, r.Until.UTC().Format(time.RFC3339), r.Why)
	}
	for _, u := range s.Unread {
		fmt.Fprintf(w, "note: could not read %s\n", u)
	}
}

func pluralQueues(n int) string {
	return fmt.Sprintf("%d %s", n, pluralize(n, "queue", "queues"))
}
