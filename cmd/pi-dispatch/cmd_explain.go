package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/pidispatch/pidispatch/config"
	"github.com/pidispatch/pidispatch/jobs"
	"github.com/pidispatch/pidispatch/operator"
)

func init() {
	register(command{name: "explain", summary: "why a job is not running: where it is and what holds it (--json)", help: explainHelp, run: runExplain})
}

const explainUsage = "usage: pi-dispatch explain [--json] [--env-file PATH] <jobId>"

const explainHelp = explainUsage + `

Finds the job on every queue of the fleet and says where it is (queue,
state, attempt, the host running it) and, when it is not running, what holds
it: one line per finding, the most important first. It reads the state the
worker's gates decide on: the pause flag and queue pauses, this host's pause
windows and scoped limits, the job's wait-for hold, its scope's fleet-wide
slots, the budget windows, the registry's hosts and their images, and the
run records of a finished job, each pull request with what became of it
as the receiver saw it (open, merged or closed, pushes a person added). It
changes nothing.

flags:
  --json            print the explanation as one JSON line
  --env-file PATH   the env file under the shell's variables, instead of
                    $PI_ENV_FILE or ./.env ("" reads none)

Reads VALKEY_URL, VALKEY_PASSWORD, PI_PAUSE_WINDOWS_FILE, PI_SCOPED_LIMITS_FILE,
PI_DAILY_CAP, PI_WEEKLY_CAP, PI_LOGS_DIR and PI_FLEET_KEY_FILE. Exits 1 when no queue has the
job, 2 for an id no job can have. See docs/operations.md.
`

func runExplain(ctx context.Context, e env, args []string) int {
	fs := flag.NewFlagSet("explain", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	asJSON := fs.Bool("json", false, "print the explanation as one JSON line")
	envFile := envFileFlag(fs)
	ids, code := parseFlags(e, fs, args, explainUsage)
	if code >= 0 {
		return code
	}
	if len(ids) != 1 {
		fmt.Fprintf(e.stderr, "pi-dispatch explain: want exactly one job id, got %d (%s)\n", len(ids), explainUsage)
		return exitUsage
	}
	e, err := applyEnvFileFlag(fs, e, *envFile)
	if err != nil {
		fmt.Fprintf(e.stderr, "pi-dispatch explain: %v\n", err)
		return exitUsage
	}
	opts, cfg := explainOptions(e)
	if opts.FleetKey, code = fleetKeyFromEnv(e, "explain"); code != exitOK {
		return code
	}
	opts.UnsignedQueues = cfg.UnsignedQueues
	client, url, code := ksConnect(e, "explain")
	if code != exitOK {
		return code
	}
	defer client.Close()
	opts.Sources = append(opts.Sources, operator.SpendSources(client, cfg)...)
	opts.PullRequests = runsOutcomes(client, opts.FleetKey)
	ctx, cancel := context.WithTimeout(ctx, ksCommandTimeout)
	defer cancel()
	id := ids[0]
	ex, err := operator.Explain(ctx, client, id, opts)
	switch {
	case errors.Is(err, operator.ErrInvalidJobID):
		fmt.Fprintf(e.stderr, "pi-dispatch %v\n", err)
		return exitUsage
	case errors.Is(err, operator.ErrJobNotFound):
		return explainNotFound(e, id, ex, *asJSON)
	case err != nil && isReply(err):
		fmt.Fprintf(e.stderr, "could not explain %s at %s\n  %v\n", id, url, err)
		return exitFailure
	case err != nil:
		return ksUnreachable(e.stderr, url, err)
	}
	if *asJSON {
		return writeJSONLine(e, "explain", ex)
	}
	printExplanation(e.stdout, ex)
	return exitOK
}

// parseFlags parses flags before or after the positional arguments
// (parseInterleaved); code is -1 to go on, else the exit code.
func parseFlags(e env, fs *flag.FlagSet, args []string, usage string) (pos []string, code int) {
	pos, err := parseInterleaved(fs, args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		// The parser's own list, so a flag missing from the help shows
		// (TestCommandHelpNamesEveryFlag).
		fmt.Fprintln(e.stdout, usage)
		fs.SetOutput(e.stdout)
		fs.PrintDefaults()
		return nil, exitOK
	case err != nil:
		fmt.Fprintf(e.stderr, "pi-dispatch %s: %v (%s)\n", fs.Name(), err, usage)
		return nil, exitUsage
	}
	return pos, -1
}

// explainOptions is this host's view, from the same variables the worker
// reads. Explain never refuses over the configuration: an invalid variable
// keeps its default and a policy file that does not load is left out, each
// with a note.
func explainOptions(e env) (operator.ExplainOptions, config.Config) {
	cfg, cfgErr := operator.ConfigForDoctor(e.getenv)
	if cfgErr != nil {
		fmt.Fprintln(e.stderr, "note: the configuration has invalid values, their defaults are used (run pi-dispatch doctor)")
	}
	opts, err := operator.ExplainOptionsFromConfig(cfg)
	if err != nil {
		fmt.Fprintf(e.stderr, "note: a policy file did not load and is left out: %v\n", err)
	}
	return opts, cfg
}

func explainNotFound(e env, id string, ex operator.Explanation, asJSON bool) int {
	fmt.Fprintf(e.stderr, "no job %s on any queue\n  hint: a finished job leaves its queue with retention; pi-dispatch runs lists recent runs\n", id)
	if asJSON {
		writeJSONLine(e, "explain", ex)
		return exitFailure
	}
	if len(ex.Records) > 0 {
		printRecords(e.stdout, ex)
	}
	return exitFailure
}

// printExplanation writes where the job is, then one line per finding.
func printExplanation(w io.Writer, ex operator.Explanation) {
	var where []string
	where = append(where, fmt.Sprintf("attempt %d", ex.Attempt))
	if ex.Attempts > 0 {
		where[0] += fmt.Sprintf(" of %d", ex.Attempts)
	}
	if ex.Host != "" {
		where = append(where, "last taken by "+ex.Host)
	}
	fmt.Fprintf(w, "job %s on %s: %s, %s\n", ex.JobID, ex.Queue, ex.State, strings.Join(where, ", "))
	for _, f := range ex.Findings {
		fmt.Fprintln(w, f.Words)
	}
	if len(ex.Records) > 0 {
		printRecords(w, ex)
	}
}

func printRecords(w io.Writer, ex operator.Explanation) {
	from := map[string]string{operator.RunsFromMirror: "the run mirror", operator.RunsFromLogsDir: "PI_LOGS_DIR"}[ex.RecordsFrom]
	fmt.Fprintf(w, "run records (%s):\n", from)
	if o := ex.PullRequestOutcomes; o != "" && o != operator.OutcomesJoined && o != operator.OutcomesOff {
		fmt.Fprintf(w, "  note: pull request outcomes %s\n", o)
	}
	for _, r := range ex.Records {
		fmt.Fprintf(w, "  attempt %d  ended %s  on %s  %s/%s%s\n", r.Attempt, r.EndedAt.UTC().Format("2006-01-02T15:04:05Z"), r.Host, r.Outcome, r.Reason, dollars(r, " "))
		if r.PullRequestURL != "" {
			fmt.Fprintf(w, "    pull request: %s\n", pullRequestText(r))
		}
		if r.StatusCommentURL != "" {
			fmt.Fprintf(w, "    status comment: %s\n", r.StatusCommentURL)
		}
	}
}

// dollars is a record's spend, "$0.1234", prefixed; "" when it has none.
func dollars(r jobs.Record, prefix string) string {
	if r.Spend == nil {
		return ""
	}
	return fmt.Sprintf("%s$%.4f", prefix, r.Spend.Dollars)
}
