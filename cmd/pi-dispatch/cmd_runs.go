package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/fleetstate"
	"github.com/pidispatch/pidispatch/jobs"
	"github.com/pidispatch/pidispatch/operator"
)

func init() {
	register(command{name: "runs", summary: "the fleet's recent runs from the run mirror, with totals (--json)", help: runsHelp, run: runRuns})
}

const runsUsage = "usage: pi-dispatch runs [--host NAME] [--outcome O] [--reason R] [--target T] [--since 24h] [--until T] [--limit 50] [--json]\n" +
	"       pi-dispatch runs --by repo|trigger|model|flow|host|outcome [filters] [--since 30d] [--json|--csv]"

const runsHelp = runsUsage + `

Lists recent runs, newest first, one row per attempt (ended, host, job,
outcome, reason, attempt, duration, dollars, the pull request and what
became of it: open, merged or closed, and how many pushes a person added
to it, as the receiver saw them), then a totals line: runs, jobs,
runs by outcome and the dollars spent. It reads the fleet's run mirror on
Valkey, or this host's PI_LOGS_DIR when there is no mirror to read, and says
which. A record that does not validate is skipped and counted.

flags:
  --host NAME       only runs of this worker
  --outcome O       only completed, policy or failed runs
  --reason R        only runs with this reason (docs/records.md)
  --target T        only runs of this target: owner/name, or local:<folder name>
  --since WHEN      only runs that ended after WHEN: a duration before now
                    (24h, 90m, 7d) or an RFC 3339 time
  --until WHEN      only runs that ended at or before WHEN
  --limit N         how many rows (default 50, at most 10000); totals count all
  --json            print {"runs":[...],"totals":{...}} as one JSON line
  --by GROUPING     instead of the list, sum every matching run by repo,
                    trigger, model, flow, host or outcome: runs, attempts,
                    dollars, tokens, turns, wall time, p50/p90 cost per run,
                    pull requests, the share merged, the cost per merged pull
                    request, and predicted against actual cost. --since
                    defaults to 30d; --limit does not apply
  --csv             with --by: a header, one line per row and a total line,
                    dollars with six decimals (--json prints the report)
  --env-file PATH   the env file under the shell's variables, instead of
                    $PI_ENV_FILE or ./.env ("" reads none)

With --by, the table's dollars are rounded to the cent; the JSON and CSV
give them exactly, with six decimals.

Reads VALKEY_URL, VALKEY_PASSWORD, PI_LOGS_DIR and PI_FLEET_KEY_FILE (with
a key, an outcome it did not sign is not shown). See docs/operations.md.
`

// runsJSON is `runs --json`.
type runsJSON struct {
	Runs   []jobs.Record   `json:"runs"`
	Totals operator.Totals `json:"totals"`
}

func runRuns(ctx context.Context, e env, args []string) int {
	fs := flag.NewFlagSet("runs", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var f operator.RunsFilter
	fs.StringVar(&f.Host, "host", "", "only runs of this worker")
	fs.StringVar(&f.Outcome, "outcome", "", "only runs with this outcome")
	fs.StringVar(&f.Reason, "reason", "", "only runs with this reason")
	fs.StringVar(&f.Target, "target", "", "only runs of this target")
	since := fs.String("since", "", "only runs that ended after")
	until := fs.String("until", "", "only runs that ended at or before")
	fs.IntVar(&f.Limit, "limit", operator.DefaultRunsLimit, "how many rows")
	asJSON := fs.Bool("json", false, "one JSON line")
	by := fs.String("by", "", "sum the runs by")
	asCSV := fs.Bool("csv", false, "CSV, with --by")
	envFile := envFileFlag(fs)
	pos, code := parseFlags(e, fs, args, runsUsage)
	if code >= 0 {
		return code
	}
	if len(pos) > 0 {
		fmt.Fprintf(e.stderr, "pi-dispatch runs: unexpected argument %q (%s)\n", pos[0], runsUsage)
		return exitUsage
	}
	if msg := checkBreakdownFlags(fs, *by, *asJSON, *asCSV); msg != "" {
		fmt.Fprintf(e.stderr, "pi-dispatch runs: %s (%s)\n", msg, runsUsage)
		return exitUsage
	}
	if *by != "" && *since == "" {
		*since = defaultBreakdownSince
	}
	if msg := checkRunsFilter(&f, *since, *until, time.Now()); msg != "" {
		fmt.Fprintf(e.stderr, "pi-dispatch runs: %s (%s)\n", msg, runsUsage)
		return exitUsage
	}
	e, err := applyEnvFileFlag(fs, e, *envFile)
	if err != nil {
		fmt.Fprintf(e.stderr, "pi-dispatch runs: %v\n", err)
		return exitUsage
	}
	cfg, _ := operator.ConfigForDoctor(e.getenv)
	f.LogsDir = cfg.LogsDir
	client, url, code := ksConnect(e, "runs")
	if code != exitOK {
		return code
	}
	defer client.Close()
	if *by != "" {
		return runBreakdown(ctx, e, client, url, f, operator.BreakdownBy(*by), *asJSON, *asCSV)
	}
	key, code := fleetKeyFromEnv(e, "runs")
	if code != exitOK {
		return code
	}
	f.PullRequests = runsOutcomes(client, key)
	ctx, cancel := context.WithTimeout(ctx, ksCommandTimeout)
	defer cancel()
	recs, tot, err := operator.Runs(ctx, client, f)
	if err != nil {
		if !ksAuthRefused(e.stderr, "read the run mirror", url, err) {
			fmt.Fprintf(e.stderr, "pi-dispatch runs: %v\n", err)
		}
		return exitFailure
	}
	if *asJSON {
		return writeJSONLine(e, "runs", runsJSON{Runs: recs, Totals: tot})
	}
	if err := printRuns(e.stdout, recs, tot, f.LogsDir); err != nil {
		return exitFailure
	}
	return exitOK
}

// checkRunsFilter refuses values no run can match, naming the rule.
func checkRunsFilter(f *operator.RunsFilter, since, until string, now time.Time) string {
	var err error
	switch {
	case f.Host != "" && fleet.ValidateName(f.Host) != nil:
		return fmt.Sprintf("--host %q is not a worker name", f.Host)
	case f.Outcome != "" && !slices.Contains([]string{jobs.OutcomeCompleted, jobs.OutcomePolicy, jobs.OutcomeFailed}, f.Outcome):
		return fmt.Sprintf("--outcome must be completed, policy or failed, not %q", f.Outcome)
	case f.Reason != "" && !slices.Contains(jobs.Reasons, jobs.Reason(f.Reason)):
		return fmt.Sprintf("--reason %q is not a run record reason (docs/records.md)", f.Reason)
	case f.Limit < 1 || f.Limit > fleetstate.MaxMirrorReadLimit:
		return fmt.Sprintf("--limit must be between 1 and %d", fleetstate.MaxMirrorReadLimit)
	}
	if since != "" {
		if f.Since, err = operator.ParseInstant(since, now); err != nil {
			return "--since: " + err.Error()
		}
	}
	if until != "" {
		if f.Until, err = operator.ParseInstant(until, now); err != nil {
			return "--until: " + err.Error()
		}
	}
	return ""
}

// printRuns writes the table and its totals line.
func printRuns(w io.Writer, recs []jobs.Record, tot operator.Totals, logsDir string) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ENDED\tHOST\tJOB\tOUTCOME\tREASON\tATTEMPT\tDURATION\tDOLLARS\tPULL REQUEST")
	for _, r := range recs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", r.EndedAt.UTC().Format("2006-01-02T15:04:05Z"), r.Host, r.JobID,
			r.Outcome, r.Reason, r.Attempt, r.EndedAt.Sub(r.StartedAt).Round(time.Second), orDash(dollars(r, "")), orDash(pullRequestText(r)))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w, totalsLine(tot))
	if tot.Shown < tot.Runs {
		fmt.Fprintf(w, "showing the newest %d of %d runs (--limit)\n", tot.Shown, tot.Runs)
	}
	switch tot.Source {
	case operator.RunsFromMirror:
		if tot.LocalOnly > 0 {
			fmt.Fprintf(w, "source: the fleet's run mirror and this host's PI_LOGS_DIR (%s): %d run(s) only there, not mirrored\n", logsDir, tot.LocalOnly)
		} else {
			fmt.Fprintln(w, "source: the fleet's run mirror")
		}
	default:
		fmt.Fprintf(w, "source: this host's PI_LOGS_DIR (%s): no run mirror to read\n", logsDir)
	}
	if tot.Degraded != "" && tot.Degraded != fleetstate.MirrorOff {
		fmt.Fprintf(w, "note: run mirror %s\n", tot.Degraded)
	}
	if tot.Invalid > 0 {
		fmt.Fprintf(w, "note: %d invalid record(s) skipped\n", tot.Invalid)
	}
	if tot.PullRequestOutcomes != operator.OutcomesJoined && tot.PullRequestOutcomes != operator.OutcomesOff {
		fmt.Fprintf(w, "note: pull request outcomes %s: what became of each pull request is not shown\n", tot.PullRequestOutcomes)
	}
	return nil
}

// pullRequestText is a record's pull request and, when the receiver's
// store knows it, what became of it: "URL (merged, +1 human push)".
func pullRequestText(r jobs.Record) string {
	if r.PullRequestURL == "" || r.PullRequest == nil {
		return r.PullRequestURL
	}
	o := r.PullRequest
	s := o.State
	if o.HumanCommits > 0 {
		s += fmt.Sprintf(", +%d %s", o.HumanCommits, pluralize(o.HumanCommits, "human push", "human pushes"))
	}
	return r.PullRequestURL + " (" + s + ")"
}

func totalsLine(tot operator.Totals) string {
	outcomes := make([]string, 0, len(tot.ByOutcome))
	for o, n := range tot.ByOutcome {
		outcomes = append(outcomes, fmt.Sprintf("%s %d", o, n))
	}
	sort.Strings(outcomes)
	by := ""
	if len(outcomes) > 0 {
		by = " (" + strings.Join(outcomes, ", ") + ")"
	}
	return fmt.Sprintf("total: %d %s of %d %s%s; $%.4f spent over %d priced %s",
		tot.Runs, pluralize(tot.Runs, "run", "runs"), tot.Jobs, pluralize(tot.Jobs, "job", "jobs"), by,
		tot.Dollars, tot.Priced, pluralize(tot.Priced, "run", "runs"))
}
