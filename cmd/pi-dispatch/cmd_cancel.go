package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"time"

	"github.com/pidispatch/pidispatch/operator"
)

func init() {
	register(command{name: "cancel", killSwitch: true, summary: "remove a queued job, or stop a running one through its worker", help: cancelHelp, run: runCancel})
}

const cancelUsage = "usage: pi-dispatch cancel [--wait 10s] <jobId>"

func runCancel(ctx context.Context, e env, args []string) int {
	id, wait, code, done := parseCancelArgs(e, args)
	if done {
		return code
	}
	client, url, code := ksConnect(e, "cancel")
	if code != exitOK {
		return code
	}
	defer client.Close()
	ctx, cancel := context.WithTimeout(ctx, ksCommandTimeout+wait)
	defer cancel()

	res, err := operator.CancelWith(ctx, client, id, cancelOptions(e, wait))
	switch {
	case errors.Is(err, operator.ErrInvalidJobID):
		fmt.Fprintf(e.stderr, "pi-dispatch %v\n", err)
		return exitUsage
	case err != nil && isReply(err):
		fmt.Fprintf(e.stderr, "could not cancel %s at %s\n  %v\n", id, url, err)
		return exitFailure
	case err != nil:
		return ksUnreachable(e.stderr, url, err)
	}
	return reportCancel(e, id, wait, res)
}

// parseCancelArgs reads the one job id and --wait, flags before or after the id; done means the command ends with code.
func parseCancelArgs(e env, args []string) (id string, wait time.Duration, code int, done bool) {
	fs := flag.NewFlagSet("cancel", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	waitFlag := fs.Duration("wait", operator.DefaultCancelWait, "how long to wait for the worker running the job to acknowledge")
	// Flags may come before or after the job id.
	var ids []string
	rest := args
	for {
		if err := fs.Parse(rest); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				fmt.Fprintln(e.stdout, cancelUsage)
				return "", 0, exitOK, true
			}
			fmt.Fprintf(e.stderr, "pi-dispatch cancel: %v (%s)\n", err, cancelUsage)
			return "", 0, exitUsage, true
		}
		if fs.NArg() == 0 {
			break
		}
		ids = append(ids, fs.Arg(0))
		rest = fs.Args()[1:]
	}
	if len(ids) != 1 {
		fmt.Fprintf(e.stderr, "pi-dispatch cancel: want exactly one job id, got %d (%s)\n", len(ids), cancelUsage)
		return "", 0, exitUsage, true
	}
	if *waitFlag <= 0 {
		fmt.Fprintf(e.stderr, "pi-dispatch cancel: --wait must be positive (%s)\n", cancelUsage)
		return "", 0, exitUsage, true
	}
	return ids[0], *waitFlag, exitOK, false
}

// reportCancel says what the cancel did: 0 when the job was removed or stopped, else 1 with why nothing (surely) changed.
func reportCancel(e env, id string, wait time.Duration, res operator.CancelResult) int {
	switch res.Where {
	case operator.CancelRemoved:
		reportCancelRemoved(e, id, res)
		return exitOK
	case operator.CancelRunningStopped:
		host := res.Host
		if host == "" {
			host = "(an unnamed worker)"
		}
		fmt.Fprintf(e.stdout, "cancelled %s: stopped on host %s (%s); its run record says operator-cancel\n", id, host, res.Queue)
		return exitOK
	case operator.CancelNotFound:
		fmt.Fprintf(e.stderr, "no job %s on any queue — nothing changed\n", id)
	case operator.CancelFinished:
		fmt.Fprintf(e.stderr, "job %s already finished (%s) on %s — nothing changed\n", id, res.State, res.Queue)
	case operator.CancelSchedulerRun:
		fmt.Fprintf(e.stderr, "job %s is the pending run of scheduler %s on %s — nothing changed; remove the trigger (its cron entry) to stop it\n", id, res.SchedulerID, res.Queue)
	case operator.CancelTimeout:
		fmt.Fprintf(e.stderr, "no worker acknowledged the cancel of running job %s on %s within %s — request withdrawn, nothing changed\n", id, res.Queue, wait)
	case operator.CancelUnconfirmed:
		fmt.Fprintf(e.stderr, "a worker took the cancel request for running job %s on %s but did not acknowledge it within %s — it was probably stopped; check its run record\n", id, res.Queue, wait)
	default:
		fmt.Fprintf(e.stderr, "cancel %s: %s\n", id, res.Where)
	}
	return exitFailure
}

// reportCancelRemoved says a queued job was removed and where its run record went, since no worker writes one for it.
func reportCancelRemoved(e env, id string, res operator.CancelResult) {
	fmt.Fprintf(e.stdout, "cancelled %s: removed from %s (it was %s)\n", id, res.Queue, res.State)
	if res.Record != nil {
		where := "the run mirror"
		if res.RecordPath != "" {
			where = res.RecordPath + " and the run mirror"
		}
		fmt.Fprintf(e.stdout, "  recorded as attempt %d, %s/%s, in %s\n", res.Record.Attempt, res.Record.Outcome, res.Record.Reason, where)
	}
	if res.RecordErr != nil {
		fmt.Fprintf(e.stderr, "  the cancel's record was not written everywhere: %v\n", res.RecordErr)
	}
}

// cancelOptions names this host in a removed job's record (PI_WORKER_NAME,
// else the hostname) and writes the record to PI_LOGS_DIR when it is an
// absolute path, else only to the run mirror: like pause, cancel never
// refuses to act over the rest of the configuration.
func cancelOptions(e env, wait time.Duration) operator.CancelOptions {
	opts := operator.CancelOptions{Wait: wait, Host: e.getenv("PI_WORKER_NAME")}
	if dir := e.getenv("PI_LOGS_DIR"); filepath.IsAbs(dir) {
		opts.LogsDir = filepath.Clean(dir)
	}
	return opts
}
