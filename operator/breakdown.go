package operator

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/pidispatch/pidispatch/internal/percentile"
	"github.com/pidispatch/pidispatch/jobs"
)

// BreakdownBy is what Breakdown groups runs by.
type BreakdownBy string

// The groupings of Breakdown.
const (
	ByRepo    BreakdownBy = "repo"    // the record's target: owner/name, or local:<folder>
	ByTrigger BreakdownBy = "trigger" // the triggers.json entry that made the job
	ByModel   BreakdownBy = "model"   // provider/model, from the spend's split
	ByFlow    BreakdownBy = "flow"
	ByHost    BreakdownBy = "host"
	ByOutcome BreakdownBy = "outcome"
)

// Groupings lists every BreakdownBy, in the order help text shows them.
var Groupings = []BreakdownBy{ByRepo, ByTrigger, ByModel, ByFlow, ByHost, ByOutcome}

// ErrUnknownGrouping is a BreakdownBy outside Groupings.
var ErrUnknownGrouping = errors.New("unknown grouping")

// NoKey is the key of runs that have no value for the grouping (a job no
// trigger made, a run with no model spend).
const NoKey = "(none)"

// BreakdownRow sums the runs of one key. Money is in micro-dollars, exact:
// the rows of a breakdown add up to its total, and the total to the
// records'. A run is one job (all its attempts); an attempt is one record.
type BreakdownRow struct {
	Key      string  `json:"key"`
	Runs     int     `json:"runs"`
	Attempts int     `json:"attempts"`
	Micros   int64   `json:"micros"`
	Dollars  float64 `json:"dollars"`
	Tokens   int64   `json:"tokens"`
	Turns    int64   `json:"turns"`
	WallMs   int64   `json:"wallMs"`
	// P50Micros and P90Micros are the nearest-rank percentiles of the
	// cost per run.
	P50Micros int64 `json:"p50Micros"`
	P90Micros int64 `json:"p90Micros"`
	// PullRequests counts runs that published one, Merged and Closed those
	// whose pull request was merged or closed without merge afterwards.
	PullRequests int `json:"pullRequests"`
	Merged       int `json:"merged"`
	Closed       int `json:"closed"`
	// MicrosPerMerged is Micros over Merged (0 when nothing merged):
	// what a merged pull request cost, the runs that merged nothing
	// included.
	MicrosPerMerged int64 `json:"microsPerMerged"`
}

// Breakdown groups recs by `by` and sums each group, largest spend first,
// and their total. Records are taken as given (filter them first). By
// model, a run's spend is split by its models; spend a record does not
// split (records written before the split existed) is under NoKey.
func Breakdown(recs []jobs.Record, by BreakdownBy) ([]BreakdownRow, BreakdownRow, error) {
	if !slices.Contains(Groupings, by) {
		return nil, BreakdownRow{}, fmt.Errorf("%w %q: one of repo, trigger, model, flow, host, outcome", ErrUnknownGrouping, by)
	}
	groups := map[string]*group{}
	total := newGroup()
	for _, r := range recs {
		total.add(r, share{micros: recordMicros(r), tokens: recordTokens(r), whole: true})
		for key, s := range keysOf(r, by) {
			g := groups[key]
			if g == nil {
				g = newGroup()
				groups[key] = g
			}
			g.add(r, s)
		}
	}
	rows := make([]BreakdownRow, 0, len(groups))
	for key, g := range groups {
		rows = append(rows, g.row(key))
	}
	slices.SortFunc(rows, func(a, b BreakdownRow) int {
		if c := cmp.Compare(b.Micros, a.Micros); c != 0 {
			return c
		}
		return cmp.Compare(a.Key, b.Key)
	})
	return rows, total.row("total"), nil
}

// share is what one record gives one group: all of it, or (by model) a
// model's part of its spend.
type share struct {
	micros, tokens int64
	whole          bool // the run's turns, time and pull request count here
}

// keysOf maps a record to its group keys and what each gets.
func keysOf(r jobs.Record, by BreakdownBy) map[string]share {
	whole := share{micros: recordMicros(r), tokens: recordTokens(r), whole: true}
	switch by {
	case ByRepo:
		return map[string]share{orNone(r.Target): whole}
	case ByTrigger:
		return map[string]share{orNone(r.Trigger): whole}
	case ByFlow:
		return map[string]share{orNone(r.Flow): whole}
	case ByHost:
		return map[string]share{orNone(r.Host): whole}
	case ByOutcome:
		return map[string]share{orNone(r.Outcome): whole}
	}
	if r.Spend == nil || len(r.Spend.Models) == 0 {
		return map[string]share{NoKey: whole}
	}
	out := map[string]share{}
	var split, splitTokens int64
	for _, m := range r.Spend.Models {
		k := m.Provider + "/" + m.Model
		s := out[k]
		s.micros += m.Micros
		s.tokens += m.Tokens.Total()
		out[k] = s
		split += m.Micros
		splitTokens += m.Tokens.Total()
	}
	if rest, restTokens := r.Spend.Micros-split, r.Spend.Tokens.Total()-splitTokens; rest > 0 || restTokens > 0 {
		s := out[NoKey]
		s.micros += max(rest, 0)
		s.tokens += max(restTokens, 0)
		out[NoKey] = s
	}
	return out
}

func orNone(s string) string {
	if s == "" {
		return NoKey
	}
	return s
}

func recordMicros(r jobs.Record) int64 {
	if r.Spend == nil {
		return 0
	}
	return r.Spend.Micros
}

func recordTokens(r jobs.Record) int64 {
	if r.Spend == nil {
		return 0
	}
	return r.Spend.Tokens.Total()
}

// recordTurns reads the turns of the record's exit line, 0 when it has none.
func recordTurns(r jobs.Record) int64 {
	var t struct {
		Turns int64 `json:"turns"`
	}
	if len(r.Telemetry) == 0 || json.Unmarshal(r.Telemetry, &t) != nil || t.Turns < 0 {
		return 0
	}
	return t.Turns
}

// runID names a run: a job on its queue.
func runID(r jobs.Record) string { return r.Queue + "\x00" + r.JobID }

type group struct {
	sum     BreakdownRow
	perRun  map[string]int64 // micros by run
	pr      map[string]bool  // runs that published a pull request
	outcome map[string]string
}

func newGroup() *group {
	return &group{perRun: map[string]int64{}, pr: map[string]bool{}, outcome: map[string]string{}}
}

func (g *group) add(r jobs.Record, s share) {
	id := runID(r)
	g.sum.Attempts++
	g.sum.Micros += s.micros
	g.sum.Tokens += s.tokens
	g.perRun[id] += s.micros
	if !s.whole {
		return
	}
	g.sum.Turns += recordTurns(r)
	if d := r.EndedAt.Sub(r.StartedAt); d > 0 {
		g.sum.WallMs += d.Milliseconds()
	}
	if r.PullRequestURL != "" {
		g.pr[id] = true
	}
	if r.PullRequest != nil {
		g.outcome[id] = r.PullRequest.State
	}
}

func (g *group) row(key string) BreakdownRow {
	row := g.sum
	row.Key = key
	row.Runs = len(g.perRun)
	row.Dollars = jobs.USD(row.Micros)
	costs := make([]int64, 0, len(g.perRun))
	for _, m := range g.perRun {
		costs = append(costs, m)
	}
	row.P50Micros, row.P90Micros = NearestRank(costs, 50), NearestRank(costs, 90)
	row.PullRequests = len(g.pr)
	for id, state := range g.outcome {
		switch {
		case !g.pr[id]:
		case state == jobs.PullRequestMerged:
			row.Merged++
		case state == jobs.PullRequestClosed:
			row.Closed++
		}
	}
	if row.Merged > 0 {
		row.MicrosPerMerged = row.Micros / int64(row.Merged)
	}
	return row
}

// NearestRank is the p-th percentile of values by the nearest-rank rule
// (the smallest value with at least p% of values at or below it); 0 for no
// values. values is sorted in place. Cost predictions use the same rule.
func NearestRank(values []int64, p int) int64 { return percentile.NearestRank(values, p) }

// SeriesPoint is one bucket of a breakdown over time.
type SeriesPoint struct {
	Start time.Time      `json:"start"`
	Rows  []BreakdownRow `json:"rows"`
	Total BreakdownRow   `json:"total"`
}

// BreakdownSeries buckets recs by their end time (bucket wide, aligned to
// the Unix epoch in UTC) from since to until, and breaks each bucket down
// by `by`: the dashboard's charts (spend per day by repository, runs per
// hour by outcome). Empty buckets are kept, so a chart's axis is even.
func BreakdownSeries(recs []jobs.Record, by BreakdownBy, bucket time.Duration, since, until time.Time) ([]SeriesPoint, error) {
	if bucket <= 0 || until.Before(since) {
		return nil, errors.New("series: bucket must be positive and until not before since")
	}
	first := since.UTC().Truncate(bucket)
	n := int(until.Sub(first)/bucket) + 1
	if n > 10_000 {
		return nil, errors.New("series: more than 10,000 buckets")
	}
	per := make([][]jobs.Record, n)
	for _, r := range recs {
		if r.EndedAt.Before(first) || r.EndedAt.After(until) {
			continue
		}
		i := int(r.EndedAt.Sub(first) / bucket)
		per[i] = append(per[i], r)
	}
	out := make([]SeriesPoint, n)
	for i := range out {
		rows, total, err := Breakdown(per[i], by)
		if err != nil {
			return nil, err
		}
		out[i] = SeriesPoint{Start: first.Add(time.Duration(i) * bucket), Rows: rows, Total: total}
	}
	return out, nil
}
