package operator

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pidispatch/pidispatch/fleetstate"
	"github.com/pidispatch/pidispatch/jobs"
)

// PullRequestOutcomes says what became of pull requests: the outcome of
// each URL it knows, unknown ones absent. fleetstate.PullRequests is one.
type PullRequestOutcomes interface {
	Outcomes(ctx context.Context, urls []string) (map[string]jobs.PullRequestOutcome, error)
}

// BreakdownOptions tunes RunsBreakdown.
type BreakdownOptions struct {
	// PullRequests joins each run's pull request to its outcome (merged,
	// closed); nil is RunsFilter.PullRequests, and when both are nil no
	// run counts as merged.
	PullRequests PullRequestOutcomes
	// MirrorIndexMax is the run index's size cap the fleet's workers write
	// with (fleetstate.MirrorConfig.IndexMax); 0 is
	// fleetstate.DefaultMirrorIndexMax. A full index whose oldest run is
	// inside the window reports the read truncated.
	MirrorIndexMax int
}

// States of a report's pull request join (BreakdownReport.PullRequestOutcomes).
const (
	OutcomesJoined = "joined"
	OutcomesOff    = "off" // no outcome store was given
	// A store that failed is "unreachable (<cause>)".
)

// PredictionCheck sets what runs were predicted to cost when admitted
// against what they cost, over the records that carry a prediction
// (docs/records.md, predicted). Actual is the whole record's spend, by model
// too, so the two compare like for like.
type PredictionCheck struct {
	Records         int   `json:"records"`
	PredictedMicros int64 `json:"predictedMicros"`
	ActualMicros    int64 `json:"actualMicros"`
	// The means per record, rounded down.
	MeanPredictedMicros int64 `json:"meanPredictedMicros"`
	MeanActualMicros    int64 `json:"meanActualMicros"`
}

func (p *PredictionCheck) add(r jobs.Record) {
	p.Records++
	p.PredictedMicros += r.Predicted.ExpectedMicros
	p.ActualMicros += recordMicros(r)
	p.MeanPredictedMicros = p.PredictedMicros / int64(p.Records)
	p.MeanActualMicros = p.ActualMicros / int64(p.Records)
}

// ReportRow is a BreakdownRow with its dollars written exactly and its
// prediction check.
type ReportRow struct {
	BreakdownRow
	// Dollars is Micros as a decimal with six places, exact (it shadows the
	// row's float in JSON).
	Dollars   json.Number     `json:"dollars"`
	Predicted PredictionCheck `json:"predicted"`
}

// BreakdownReport is RunsBreakdown's answer.
type BreakdownReport struct {
	By BreakdownBy `json:"by"`
	// Since and Until are the filter's window (zero: unbounded).
	Since time.Time   `json:"since,omitzero"`
	Until time.Time   `json:"until,omitzero"`
	Rows  []ReportRow `json:"rows"`
	Total ReportRow   `json:"total"`
	// Records counts the records summed (one per attempt).
	Records int `json:"records"`
	// Source, Degraded, Invalid and LocalOnly are as in Totals: Degraded
	// "truncated" means the mirror had dropped runs of the window to its
	// size cap, so other hosts' runs are missing from the sums.
	Source    string `json:"source"`
	Degraded  string `json:"degraded,omitempty"`
	Invalid   int    `json:"invalid"`
	LocalOnly int    `json:"localOnly"`
	// PullRequestOutcomes is OutcomesJoined, OutcomesOff or
	// "unreachable (<cause>)"; Joined counts the pull requests whose
	// outcome was known.
	PullRequestOutcomes string `json:"pullRequestOutcomes"`
	Joined              int    `json:"joined"`
}

// RunsBreakdown sums every run that matches filter (filter.Limit is
// ignored: nothing is cut) by `by`: the fleet's run mirror, read whole in
// pages, merged with filter.LogsDir, as Runs reads them. Each run's pull
// request is joined to its outcome through opts.PullRequests; the outcome
// a record itself carries is ignored, since only the store that follows
// pull requests knows it. A failed join is reported, not an error.
func RunsBreakdown(ctx context.Context, client redis.UniversalClient, filter RunsFilter, by BreakdownBy, opts BreakdownOptions) (BreakdownReport, error) {
	if _, _, err := Breakdown(nil, by); err != nil {
		return BreakdownReport{}, err
	}
	indexMax := opts.MirrorIndexMax
	if indexMax <= 0 {
		indexMax = fleetstate.DefaultMirrorIndexMax
	}
	readMirror := func(ctx context.Context, client redis.UniversalClient, since time.Time) ([]jobs.Record, int, string, error) {
		return mirrorAll(ctx, client, since, indexMax)
	}
	all, t, err := gatherRuns(ctx, client, filter, readMirror)
	if err != nil {
		return BreakdownReport{}, err
	}
	rep := BreakdownReport{By: by, Since: filter.Since, Until: filter.Until, Source: t.Source, Degraded: t.Degraded, Invalid: t.Invalid}
	var recs []jobs.Record
	for _, r := range all {
		if !filter.match(r) {
			continue
		}
		if t.localOnly[RunKey(r)] {
			rep.LocalOnly++
		}
		recs = append(recs, r)
	}
	rep.Records = len(recs)
	store := opts.PullRequests
	if store == nil {
		store = filter.PullRequests
	}
	rep.PullRequestOutcomes, rep.Joined = JoinPullRequests(ctx, store, recs)
	rows, total, err := Breakdown(recs, by)
	if err != nil {
		return BreakdownReport{}, err
	}
	checks := map[string]*PredictionCheck{}
	var totalCheck PredictionCheck
	for _, r := range recs {
		if r.Predicted == nil {
			continue
		}
		totalCheck.add(r)
		for key := range keysOf(r, by) {
			c := checks[key]
			if c == nil {
				c = &PredictionCheck{}
				checks[key] = c
			}
			c.add(r)
		}
	}
	rep.Rows = make([]ReportRow, len(rows))
	for i, row := range rows {
		rep.Rows[i] = reportRow(row, checks[row.Key])
	}
	rep.Total = reportRow(total, &totalCheck)
	return rep, nil
}

func reportRow(row BreakdownRow, c *PredictionCheck) ReportRow {
	out := ReportRow{BreakdownRow: row, Dollars: json.Number(MicrosDecimal(row.Micros))}
	if c != nil {
		out.Predicted = *c
	}
	return out
}

// MicrosDecimal writes micro-dollars as dollars with six decimals, exactly
// ("12.345678", "-0.000001").
func MicrosDecimal(micros int64) string {
	sign := ""
	u := uint64(micros)
	if micros < 0 {
		sign, u = "-", uint64(-(micros+1))+1
	}
	return fmt.Sprintf("%s%d.%06d", sign, u/jobs.Micros, u%jobs.Micros)
}

// joinPage bounds the URLs of one Outcomes call.
const joinPage = 500

// JoinPullRequests sets each record's PullRequest to what store knows of
// its pull request, and says how the join went (OutcomesJoined, OutcomesOff
// or "unreachable (<cause>)") and how many pull requests it knew. The
// outcome a record carries is cleared first, whatever the store answers:
// a record is written by whichever host ran it, and only the store the
// receiver fills knows what became of the pull request. Every place a
// record is shown or summed joins through here.
func JoinPullRequests(ctx context.Context, store PullRequestOutcomes, recs []jobs.Record) (string, int) {
	for i := range recs {
		recs[i].PullRequest = nil
	}
	if store == nil {
		return OutcomesOff, 0
	}
	seen := map[string]bool{}
	var urls []string
	for _, r := range recs {
		if u := r.PullRequestURL; u != "" && !seen[u] {
			seen[u] = true
			urls = append(urls, u)
		}
	}
	known := map[string]jobs.PullRequestOutcome{}
	for start := 0; start < len(urls); start += joinPage {
		got, err := store.Outcomes(ctx, urls[start:min(start+joinPage, len(urls))])
		if err != nil {
			return "unreachable (" + err.Error() + ")", 0
		}
		for u, o := range got {
			if seen[u] && o.Validate() == nil {
				known[u] = o
			}
		}
	}
	for i := range recs {
		if o, ok := known[recs[i].PullRequestURL]; ok {
			recs[i].PullRequest = &o
		}
	}
	return OutcomesJoined, len(known)
}

// mirrorPage is how many index members one page of mirrorAll reads.
var mirrorPage int64 = 1000

// maxBreakdownRecords bounds what mirrorAll reads, whatever the index
// holds; past it the read is truncated.
const maxBreakdownRecords = 1_000_000

// mirrorRecordPrefix is the key prefix of the mirrored record bodies.
var mirrorRecordPrefix = strings.TrimSuffix(fleetstate.RunRecordKey("q", "j", 1), jobs.RecordMember("q", "j", 1))

// mirrorAll reads every mirrored record that ended after since, oldest
// first, in pages of mirrorPage index members: one fleetstate.Mirror.Read
// stops at fleetstate.MaxMirrorReadLimit, and a month of a busy fleet holds
// more. Each page's position is its last score and how many members of
// that score were read, so records written during the read never shift it.
// A member whose body is missing, does not parse, does not validate or is
// not under its own name is skipped and counted.
func mirrorAll(ctx context.Context, client redis.UniversalClient, since time.Time, indexMax int) ([]jobs.Record, int, string, error) {
	unreachable := func(err error) ([]jobs.Record, int, string, error) {
		return nil, 0, "unreachable (" + err.Error() + ")", fmt.Errorf("%w: %w", fleetstate.ErrMirrorUnreachable, err)
	}
	var sinceMs int64
	if !since.IsZero() {
		sinceMs = since.UnixMilli()
	}
	pipe := client.Pipeline()
	card := pipe.ZCard(ctx, fleetstate.RunIndexKey)
	oldest := pipe.ZRangeWithScores(ctx, fleetstate.RunIndexKey, 0, 0)
	if _, err := pipe.Exec(ctx); err != nil {
		return unreachable(err)
	}
	if card.Val() == 0 {
		return nil, 0, fleetstate.MirrorOff, nil
	}
	state := fleetstate.MirrorOK
	// The index is trimmed to its size cap oldest first: when it is full and
	// its oldest run is inside the window, the window lost runs.
	if card.Val() >= int64(indexMax) && len(oldest.Val()) == 1 && oldest.Val()[0].Score > float64(sinceMs) {
		state = fleetstate.MirrorTruncated
	}
	var (
		out     []jobs.Record
		invalid int
		lo      = "(" + strconv.FormatInt(sinceMs, 10)
		offset  int64
		seen    = map[string]bool{}
		read    int
	)
	for {
		page, err := client.ZRangeByScoreWithScores(ctx, fleetstate.RunIndexKey, &redis.ZRangeBy{
			Min: lo, Max: "+inf", Offset: offset, Count: mirrorPage,
		}).Result()
		if err != nil {
			return unreachable(err)
		}
		var members []string
		for _, z := range page {
			if m, ok := z.Member.(string); ok && !seen[m] {
				seen[m] = true
				members = append(members, m)
			}
		}
		if len(members) > 0 {
			keys := make([]string, len(members))
			for i, m := range members {
				keys[i] = mirrorRecordPrefix + m
			}
			bodies, err := client.MGet(ctx, keys...).Result()
			if err != nil {
				return unreachable(err)
			}
			for i, m := range members {
				rec, ok := mirroredRecord(bodies, i, m)
				if !ok {
					invalid++
					continue
				}
				out = append(out, rec)
			}
		}
		read += len(page)
		if int64(len(page)) < mirrorPage {
			return out, invalid, state, nil
		}
		if read >= maxBreakdownRecords {
			return out, invalid, fleetstate.MirrorTruncated, nil
		}
		last := page[len(page)-1].Score
		tie := int64(0)
		for _, z := range page {
			if z.Score == last {
				tie++
			}
		}
		next := strconv.FormatFloat(last, 'f', -1, 64)
		if next == lo {
			offset += tie
		} else {
			lo, offset = next, tie
		}
	}
}

// mirroredRecord reads body i of an MGET as the record of member.
func mirroredRecord(bodies []any, i int, member string) (jobs.Record, bool) {
	if i >= len(bodies) {
		return jobs.Record{}, false
	}
	s, ok := bodies[i].(string)
	if !ok {
		return jobs.Record{}, false
	}
	var rec jobs.Record
	if json.Unmarshal([]byte(s), &rec) != nil || rec.Validate() != nil || !jobs.OwnName(member, rec) {
		return jobs.Record{}, false
	}
	return rec, true
}
