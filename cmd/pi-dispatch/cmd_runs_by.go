package main

import (
	"context"
	"encoding/csv"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pidispatch/pidispatch/fleet"
	"github.com/pidispatch/pidispatch/fleetstate"
	"github.com/pidispatch/pidispatch/jobs"
	"github.com/pidispatch/pidispatch/operator"
)

// defaultBreakdownSince is --by's window when --since is not given.
const defaultBreakdownSince = "30d"

// breakdownTimeout bounds `runs --by`: it reads the whole mirror, not one
// page of it.
const breakdownTimeout = 30 * time.Second

// totalKey names the total row in the table and the CSV, where a key of
// its own ("total" may be a trigger's name) could not be told from it.
const totalKey = "(total)"

// runsOutcomes gives `runs --by` the store of pull request outcomes the
// receiver fills, checked with the fleet key when there is one: an outcome
// the key did not sign is dropped, never counted merged. Without a client
// it joins none (merged shares are then unknown, and shown so).
func runsOutcomes(client redis.UniversalClient, key fleet.Key) operator.PullRequestOutcomes {
	if client == nil {
		return nil
	}
	return fleetstate.NewPullRequestsWith(client, fleetstate.PullRequestsConfig{Key: key})
}

// checkBreakdownFlags refuses flags --by does not combine with, and a
// grouping it does not know.
func checkBreakdownFlags(fs *flag.FlagSet, by string, asJSON, asCSV bool) string {
	limitSet := false
	fs.Visit(func(f *flag.Flag) { limitSet = limitSet || f.Name == "limit" })
	switch {
	case by == "" && asCSV:
		return "--csv prints a breakdown: give --by too"
	case by == "":
		return ""
	case !slices.Contains(operator.Groupings, operator.BreakdownBy(by)):
		names := make([]string, len(operator.Groupings))
		for i, g := range operator.Groupings {
			names[i] = string(g)
		}
		return fmt.Sprintf("--by must be one of %s, not %q", strings.Join(names, ", "), by)
	case asJSON && asCSV:
		return "--json and --csv: choose one"
	case limitSet:
		return "--limit cuts the list of runs; --by sums every run that matches"
	}
	return ""
}

// runBreakdown is `runs --by`.
func runBreakdown(ctx context.Context, e env, client redis.UniversalClient, url string, f operator.RunsFilter, by operator.BreakdownBy, asJSON, asCSV bool) int {
	ctx, cancel := context.WithTimeout(ctx, breakdownTimeout)
	defer cancel()
	key, code := fleetKeyFromEnv(e, "runs")
	if code != exitOK {
		return code
	}
	rep, err := operator.RunsBreakdown(ctx, client, f, by, operator.BreakdownOptions{PullRequests: runsOutcomes(client, key)})
	if err != nil {
		if !ksAuthRefused(e.stderr, "read the run mirror", url, err) {
			fmt.Fprintf(e.stderr, "pi-dispatch runs: %v\n", err)
		}
		return exitFailure
	}
	switch {
	case asJSON:
		return writeJSONLine(e, "runs", rep)
	case asCSV:
		err = writeBreakdownCSV(e.stdout, rep)
	default:
		err = printBreakdown(e.stdout, rep, f.LogsDir)
	}
	if err != nil {
		fmt.Fprintf(e.stderr, "pi-dispatch runs: %v\n", err)
		return exitFailure
	}
	return exitOK
}

// printBreakdown writes the table, its total row and what it was read from.
func printBreakdown(w io.Writer, rep operator.BreakdownReport, logsDir string) error {
	joined := rep.PullRequestOutcomes == operator.OutcomesJoined
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "%s\tRUNS\tATTEMPTS\tDOLLARS\tTOKENS\tTURNS\tWALL\tP50/RUN\tP90/RUN\tPRS\tMERGED\t$/MERGED\tPREDICTED\tACTUAL\n", strings.ToUpper(string(rep.By)))
	row := func(key string, r operator.ReportRow) {
		merged, perMerged := "-", "-"
		if joined && r.PullRequests > 0 {
			merged = ratioPercent(r.Merged, r.PullRequests)
		}
		if joined && r.Merged > 0 {
			perMerged = cents(r.MicrosPerMerged)
		}
		predicted, actual := "-", "-"
		if r.Predicted.Records > 0 {
			predicted, actual = cents(r.Predicted.PredictedMicros), cents(r.Predicted.ActualMicros)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%d\t%d\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", key, r.Runs, r.Attempts, cents(r.Micros), r.Tokens, r.Turns,
			(time.Duration(r.WallMs) * time.Millisecond).Round(time.Second), cents(r.P50Micros), cents(r.P90Micros), r.PullRequests,
			merged, perMerged, predicted, actual)
	}
	for _, r := range rep.Rows {
		row(r.Key, r)
	}
	row(totalKey, rep.Total)
	if err := tw.Flush(); err != nil {
		return err
	}
	window := "runs that ended"
	if !rep.Since.IsZero() {
		window += " after " + rep.Since.UTC().Format(time.RFC3339)
	}
	if !rep.Until.IsZero() {
		window += ", at or before " + rep.Until.UTC().Format(time.RFC3339)
	}
	fmt.Fprintf(w, "%s: %d %s; dollars rounded to the cent (--json, --csv: exact)\n", window, rep.Records, pluralize(rep.Records, "record", "records"))
	switch {
	case rep.Source == operator.RunsFromLogsDir:
		fmt.Fprintf(w, "source: this host's PI_LOGS_DIR (%s): no run mirror to read\n", logsDir)
	case rep.LocalOnly > 0:
		fmt.Fprintf(w, "source: the fleet's run mirror and this host's PI_LOGS_DIR (%s): %d run(s) only there, not mirrored\n", logsDir, rep.LocalOnly)
	default:
		fmt.Fprintln(w, "source: the fleet's run mirror")
	}
	if rep.Degraded != "" {
		fmt.Fprintf(w, "note: run mirror %s: other hosts' runs may be missing from the sums\n", rep.Degraded)
	}
	if rep.Invalid > 0 {
		fmt.Fprintf(w, "note: %d invalid record(s) skipped\n", rep.Invalid)
	}
	if !joined {
		fmt.Fprintf(w, "note: pull request outcomes %s: MERGED and $/MERGED are not known\n", rep.PullRequestOutcomes)
	}
	return nil
}

// writeBreakdownCSV writes a header, one line per row and the total line,
// money in dollars with six decimals, exact.
func writeBreakdownCSV(w io.Writer, rep operator.BreakdownReport) error {
	cw := csv.NewWriter(w)
	joined := rep.PullRequestOutcomes == operator.OutcomesJoined
	_ = cw.Write([]string{string(rep.By), "runs", "attempts", "dollars", "tokens", "turns", "wall_ms", "p50_dollars", "p90_dollars",
		"pull_requests", "merged", "closed", "merged_share", "dollars_per_merged",
		"predicted_records", "predicted_dollars", "actual_dollars", "mean_predicted_dollars", "mean_actual_dollars"})
	line := func(key string, r operator.ReportRow) {
		share, perMerged := "", ""
		if joined && r.PullRequests > 0 {
			share = strconv.FormatFloat(float64(r.Merged)/float64(r.PullRequests), 'f', 4, 64)
		}
		if joined && r.Merged > 0 {
			perMerged = operator.MicrosDecimal(r.MicrosPerMerged)
		}
		p := r.Predicted
		_ = cw.Write([]string{key, strconv.Itoa(r.Runs), strconv.Itoa(r.Attempts), operator.MicrosDecimal(r.Micros),
			strconv.FormatInt(r.Tokens, 10), strconv.FormatInt(r.Turns, 10), strconv.FormatInt(r.WallMs, 10),
			operator.MicrosDecimal(r.P50Micros), operator.MicrosDecimal(r.P90Micros),
			strconv.Itoa(r.PullRequests), strconv.Itoa(r.Merged), strconv.Itoa(r.Closed), share, perMerged,
			strconv.Itoa(p.Records), operator.MicrosDecimal(p.PredictedMicros), operator.MicrosDecimal(p.ActualMicros),
			operator.MicrosDecimal(p.MeanPredictedMicros), operator.MicrosDecimal(p.MeanActualMicros)})
	}
	for _, r := range rep.Rows {
		line(r.Key, r)
	}
	line(totalKey, rep.Total)
	cw.Flush()
	return cw.Error()
}

// cents writes micro-dollars as dollars rounded to the nearest cent, half
// a cent up ("$12.35").
func cents(micros int64) string {
	c := (micros + jobs.Micros/200) / (jobs.Micros / 100)
	return fmt.Sprintf("$%d.%02d", c/100, c%100)
}

// ratioPercent is n of d as a whole percentage, half up.
func ratioPercent(n, d int) string {
	return strconv.Itoa((200*n+d)/(2*d)) + "%"
}
