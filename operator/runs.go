package operator

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pidispatch/pidispatch/fleetstate"
	"github.com/pidispatch/pidispatch/jobs"
	"github.com/pidispatch/pidispatch/valkey"
)

// Where Runs (and Explain's records) were read.
const (
	RunsFromMirror  = "mirror"   // the fleet's run mirror on Valkey
	RunsFromLogsDir = "logs-dir" // this host's PI_LOGS_DIR
)

// DefaultRunsLimit is how many runs Runs returns when the filter sets none.
const DefaultRunsLimit = 50

// RunsFilter selects runs. Empty fields match every run.
type RunsFilter struct {
	Host    string
	Outcome string
	Reason  string
	// Target matches the record's target: an owner/name, or local:<basename>.
	Target string
	// Since and Until bound endedAt: Since exclusive, Until inclusive.
	Since, Until time.Time
	// Limit is how many runs, newest first; 0 is DefaultRunsLimit.
	Limit int
	// LogsDir is read when there is no mirror to read (no client, Valkey
	// unreachable, or no index).
	LogsDir string
	// PullRequests joins each run returned to what became of its pull
	// request (JoinPullRequests); nil shows none. It selects nothing.
	PullRequests PullRequestOutcomes
}

// Totals sum the runs that matched the filter, the ones past Limit included.
type Totals struct {
	// Source is RunsFromMirror or RunsFromLogsDir; Degraded is the mirror's
	// state when it was not read whole (fleetstate's MirrorTruncated, or why
	// it was not read at all).
	Source   string `json:"source"`
	Degraded string `json:"degraded,omitempty"`
	// Runs counts the matching records (one per attempt), Jobs their
	// distinct job ids, Shown the records returned.
	Runs      int            `json:"runs"`
	Jobs      int            `json:"jobs"`
	Shown     int            `json:"shown"`
	ByOutcome map[string]int `json:"byOutcome"`
	// Dollars sums Spend.Dollars of the records that carry a spend; Priced
	// counts them.
	Dollars float64 `json:"dollars"`
	Priced  int     `json:"priced"`
	// Invalid counts records skipped because they do not validate: a peer's
	// junk or a damaged file is never shown.
	Invalid int `json:"invalid"`
	// LocalOnly counts the matching records read from LogsDir that the
	// mirror does not hold (not mirrored yet, Valkey down when they were
	// written, or older than the mirror keeps): merged in, never hidden.
	LocalOnly int `json:"localOnly"`
	// PullRequestOutcomes is how the runs returned were joined to their
	// pull requests' outcomes: OutcomesJoined, OutcomesOff or
	// "unreachable (<cause>)"; Joined counts the pull requests whose
	// outcome was known.
	PullRequestOutcomes string `json:"pullRequestOutcomes"`
	Joined              int    `json:"joined"`

	localOnly map[string]bool // RunKey of each local-only record
}

// ErrNoRunSource is Runs with neither a readable mirror nor a logs dir.
var ErrNoRunSource = errors.New("no run mirror and no logs dir to read runs from")

// Runs lists the fleet's recent runs, newest first, and sums them: the run
// mirror merged with this host's filter.LogsDir (a record only the folder
// holds is added and counted LocalOnly), or the folder alone when the
// mirror cannot be read or holds nothing. Every record is validated again,
// whoever wrote it, and each one returned shows the outcome of its pull
// request that filter.PullRequests knows, never one it carries itself. The
// error is for a source that cannot be read at all; a failed join is
// reported in Totals.
func Runs(ctx context.Context, client redis.UniversalClient, filter RunsFilter) ([]jobs.Record, Totals, error) {
	if filter.Limit <= 0 {
		filter.Limit = DefaultRunsLimit
	}
	recs, t, err := gatherRuns(ctx, client, filter, mirrorRuns)
	if err != nil {
		return nil, Totals{}, err
	}
	out, t, err := summarize(recs, filter, t)
	if err != nil {
		return nil, Totals{}, err
	}
	t.PullRequestOutcomes, t.Joined = JoinPullRequests(ctx, filter.PullRequests, out)
	return out, t, nil
}

// mirrorReader reads the mirrored records that ended after since: the
// valid ones, how many it skipped, and the mirror's state.
type mirrorReader func(ctx context.Context, client redis.UniversalClient, since time.Time) ([]jobs.Record, int, string, error)

// gatherRuns reads the records Runs and RunsBreakdown sum, unfiltered: the
// mirror (read by readMirror) merged with filter.LogsDir, or the folder
// alone when the mirror cannot be read or holds nothing. Totals carries
// the source, its state, the invalid count and the local-only records.
func gatherRuns(ctx context.Context, client redis.UniversalClient, filter RunsFilter, readMirror mirrorReader) ([]jobs.Record, Totals, error) {
	var degraded string
	if client != nil {
		recs, invalid, state, err := readMirror(ctx, client, filter.Since)
		// A refused password is a misconfiguration, not an outage: say so
		// rather than answer from this host alone.
		if ae := (*valkey.AuthError)(nil); errors.As(err, &ae) {
			return nil, Totals{}, err
		}
		if err == nil && state != fleetstate.MirrorOff {
			t := Totals{Source: RunsFromMirror, Invalid: invalid, Degraded: okOrEmpty(state)}
			if filter.LogsDir != "" {
				local, bad, err := dirRuns(filter.LogsDir)
				if err != nil {
					return nil, Totals{}, err
				}
				t.Invalid += bad
				recs, t.localOnly = MergeLocalRuns(recs, local)
			}
			return recs, t, nil
		}
		degraded = state
	}
	if filter.LogsDir == "" {
		if degraded != "" {
			return nil, Totals{}, fmt.Errorf("%w (mirror: %s)", ErrNoRunSource, degraded)
		}
		return nil, Totals{}, ErrNoRunSource
	}
	recs, invalid, err := dirRuns(filter.LogsDir)
	if err != nil {
		return nil, Totals{}, err
	}
	return recs, Totals{Source: RunsFromLogsDir, Invalid: invalid, Degraded: degraded}, nil
}

func okOrEmpty(state string) string {
	if state == fleetstate.MirrorOK {
		return ""
	}
	return state
}

// mirrorRuns reads every mirrored record that ended after since, through
// the mirror's own reader, which drops (and prunes) what does not validate.
// The members counted just before the read tell how many it dropped.
func mirrorRuns(ctx context.Context, client redis.UniversalClient, since time.Time) ([]jobs.Record, int, string, error) {
	lo := "-inf"
	if !since.IsZero() {
		lo = "(" + strconv.FormatInt(since.UnixMilli(), 10)
	}
	members, err := client.ZCount(ctx, fleetstate.RunIndexKey, lo, "+inf").Result()
	if err != nil {
		return nil, 0, "unreachable (" + err.Error() + ")", err
	}
	recs, state, err := fleetstate.NewMirror(client, fleetstate.MirrorConfig{}).Read(ctx, fleetstate.MaxMirrorReadLimit, since)
	if err != nil {
		return nil, 0, state, err
	}
	read := int(min(members, fleetstate.MaxMirrorReadLimit))
	invalid := max(read-len(recs), 0)
	valid := recs[:0]
	for _, r := range recs {
		if r.Validate() != nil {
			invalid++
			continue
		}
		valid = append(valid, r)
	}
	return valid, invalid, state, nil
}

// dirRuns reads every record file of a logs dir (docs/records.md): one
// <stem>.attempt-<n>.json per attempt; temp files are skipped, a file that
// does not read or validate is counted invalid.
func dirRuns(dir string) ([]jobs.Record, int, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("runs: %w", err)
	}
	var out []jobs.Record
	invalid := 0
	for _, e := range entries {
		name := e.Name()
		if !e.Type().IsRegular() || !strings.HasSuffix(name, ".json") || !strings.Contains(name, ".attempt-") || strings.Contains(name, ".tmp-") {
			continue
		}
		rec, err := jobs.ReadRecordFile(filepath.Join(dir, name))
		if err != nil {
			invalid++
			continue
		}
		out = append(out, rec)
	}
	return out, invalid, nil
}

// RunKey names one attempt's run: its host, job id and attempt.
func RunKey(r jobs.Record) string {
	return r.Host + "\x00" + r.JobID + "\x00" + strconv.Itoa(r.Attempt)
}

// MergeLocalRuns adds to mirrored the local records it does not hold (the
// same RunKey) and returns the RunKey of each one it added.
func MergeLocalRuns(mirrored, local []jobs.Record) (merged []jobs.Record, localOnly map[string]bool) {
	have := make(map[string]bool, len(mirrored))
	for _, r := range mirrored {
		have[RunKey(r)] = true
	}
	merged, localOnly = slices.Clip(mirrored), map[string]bool{}
	for _, r := range local {
		if k := RunKey(r); !have[k] && !localOnly[k] {
			localOnly[k] = true
			merged = append(merged, r)
		}
	}
	return merged, localOnly
}

// summarize filters recs, sorts them newest first, sums them and cuts them
// at the limit.
func summarize(recs []jobs.Record, f RunsFilter, t Totals) ([]jobs.Record, Totals, error) {
	var out []jobs.Record
	ids := map[string]bool{}
	t.ByOutcome = map[string]int{}
	for _, r := range recs {
		if !f.match(r) {
			continue
		}
		out = append(out, r)
		ids[r.JobID] = true
		t.ByOutcome[r.Outcome]++
		if t.localOnly[RunKey(r)] {
			t.LocalOnly++
		}
		if r.Spend != nil && !math.IsNaN(r.Spend.Dollars) && !math.IsInf(r.Spend.Dollars, 0) {
			t.Dollars += r.Spend.Dollars
			t.Priced++
		}
	}
	slices.SortStableFunc(out, func(a, b jobs.Record) int { return b.EndedAt.Compare(a.EndedAt) })
	t.Runs, t.Jobs = len(out), len(ids)
	if len(out) > f.Limit {
		out = out[:f.Limit]
	}
	t.Shown = len(out)
	if out == nil {
		out = []jobs.Record{}
	}
	return out, t, nil
}

func (f RunsFilter) match(r jobs.Record) bool {
	switch {
	case f.Host != "" && r.Host != f.Host,
		f.Outcome != "" && r.Outcome != f.Outcome,
		f.Reason != "" && r.Reason != jobs.Reason(f.Reason),
		f.Target != "" && r.Target != f.Target,
		!f.Since.IsZero() && !r.EndedAt.After(f.Since),
		!f.Until.IsZero() && r.EndedAt.After(f.Until):
		return false
	}
	return true
}

// ParseInstant reads a --since or --until value: a duration before now
// ("24h", "90m", or days "7d"), or an RFC 3339 instant.
func ParseInstant(s string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	if days, ok := strings.CutSuffix(s, "d"); ok {
		if n, err := strconv.Atoi(days); err == nil && n >= 0 && n <= 3650 {
			return now.Add(-time.Duration(n) * 24 * time.Hour), nil
		}
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return time.Time{}, fmt.Errorf("%q is neither a duration before now (24h, 90m, 7d) nor an RFC 3339 time (2026-01-02T15:04:05Z)", s)
	}
	return now.Add(-d), nil
}
