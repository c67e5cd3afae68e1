package dash

import (
	"context"
	"net/http"
	"slices"
	"time"

	"github.com/pidispatch/pidispatch/jobs"
	"github.com/pidispatch/pidispatch/operator"
)

// RecordReader is what the charts are drawn from. New adds the charts (GET
// /api/charts) when the Source is also a RecordReader, as *Valkey is.
type RecordReader interface {
	// Records is every valid run record that ended after since, and a note
	// for the page when they are not the whole story (as Source.Runs).
	Records(ctx context.Context, since time.Time) (recs []jobs.Record, note string, err error)
}

// CapacityReader is what the capacity panel reads. New adds it (GET
// /api/capacity) when the Source is also a CapacityReader, as *Valkey is.
type CapacityReader interface {
	Capacity(ctx context.Context) (operator.CapacityReport, error)
}

// PullRequestOutcomes answers what became of pull requests, by URL (the
// receiver's store, fleetstate.PullRequests, is one); unknown URLs are
// absent from the map.
type PullRequestOutcomes interface {
	Outcomes(ctx context.Context, urls []string) (map[string]jobs.PullRequestOutcome, error)
}

// The charts' spans: spend, cost and merged share per day over chartDays,
// runs and queue wait per hour over chartHours.
const (
	chartDays  = 14
	chartHours = 48
	// chartKeys is how many keys the spend chart stacks; the rest are
	// summed under otherKey.
	chartKeys = 8
	otherKey  = "(other)"
)

// chartGroupings are the groupings the spend chart can stack by.
var chartGroupings = []operator.BreakdownBy{operator.ByRepo, operator.ByTrigger, operator.ByModel}

// chartsView is the JSON of /api/charts. Money is in micro-dollars, exact;
// Parts of each point line up with Keys (or Outcomes).
type chartsView struct {
	Now time.Time `json:"now"`
	By  string    `json:"by"`
	// Keys are the spend chart's stacked keys, largest spend first.
	Keys        []string    `json:"keys"`
	SpendPerDay []spendDay  `json:"spendPerDay"`
	Outcomes    []string    `json:"outcomes"`
	RunsPerHour []runsHour  `json:"runsPerHour"`
	QueueWait   []waitHour  `json:"queueWait"`
	CostPerDay  []costDay   `json:"costPerDay"`
	Merged      []mergedDay `json:"mergedPerDay"`
	// QueueDepth is the jobs ready on every queue now; null when the
	// queues could not be read.
	QueueDepth *int64 `json:"queueDepth"`
	// Joined says whether pull request outcomes were joined (merged share
	// needs them).
	Joined bool              `json:"joined"`
	Note   string            `json:"note,omitempty"`
	Errors map[string]string `json:"errors"`
}

type spendDay struct {
	Start  time.Time `json:"start"`
	Micros int64     `json:"micros"`
	Parts  []int64   `json:"parts"`
}

type runsHour struct {
	Start time.Time `json:"start"`
	Runs  int       `json:"runs"`
	Parts []int     `json:"parts"`
}

type waitHour struct {
	Start time.Time `json:"start"`
	// Runs counts the records that carry a queue wait.
	Runs  int   `json:"runs"`
	P50Ms int64 `json:"p50Ms"`
	P90Ms int64 `json:"p90Ms"`
}

type costDay struct {
	Start     time.Time `json:"start"`
	Runs      int       `json:"runs"`
	P90Micros int64     `json:"p90Micros"`
}

type mergedDay struct {
	Start        time.Time `json:"start"`
	PullRequests int       `json:"pullRequests"`
	Merged       int       `json:"merged"`
	Closed       int       `json:"closed"`
}

// chartRoutes adds the charts and the capacity panel when the source reads them.
func (h *Handler) chartRoutes() {
	if rr, ok := h.src.(RecordReader); ok {
		h.mux.HandleFunc("GET /api/charts", h.authed(func(w http.ResponseWriter, r *http.Request) { h.serveCharts(w, r, rr) }))
	}
	if cr, ok := h.src.(CapacityReader); ok {
		h.mux.HandleFunc("GET /api/capacity", h.authed(func(w http.ResponseWriter, r *http.Request) { h.serveCapacity(w, r, cr) }))
	}
}

func (h *Handler) serveCapacity(w http.ResponseWriter, r *http.Request, cr CapacityReader) {
	ctx, cancel := context.WithTimeout(r.Context(), DefaultReadTimeout)
	defer cancel()
	rep, err := cr.Capacity(ctx)
	if err != nil {
		h.log.Warn("dash_read_failed", "section", "capacity", "err", err)
		writeJSON(w, http.StatusInternalServerError, actionReply{Message: "could not read the capacity: " + err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, rep)
}

func (h *Handler) serveCharts(w http.ResponseWriter, r *http.Request, rr RecordReader) {
	by := operator.BreakdownBy(r.URL.Query().Get("by"))
	if by == "" {
		by = operator.ByRepo
	}
	if !slices.Contains(chartGroupings, by) {
		writeJSON(w, http.StatusBadRequest, actionReply{Message: "by must be repo, trigger or model"})
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), DefaultReadTimeout)
	defer cancel()
	now := h.now()
	v := chartsView{Now: now.UTC(), By: string(by), Errors: map[string]string{}}
	if rep, err := h.src.Queues(ctx); err != nil {
		v.Errors[secQueues] = err.Error()
	} else {
		var depth int64
		for _, q := range rep.PerQueue {
			depth += q.Waiting + q.Paused + q.Prioritized
		}
		v.QueueDepth = &depth
	}
	days := dayStart(now).AddDate(0, 0, -(chartDays - 1))
	recs, note, err := rr.Records(ctx, days.Add(-time.Millisecond))
	if err != nil {
		v.Errors[secRuns] = err.Error()
		recs = nil
	}
	v.Note = note
	switch state, _ := operator.JoinPullRequests(ctx, h.opts.PullRequests, recs); state {
	case operator.OutcomesJoined:
		v.Joined = true
	case operator.OutcomesOff:
	default:
		v.Errors["pullRequests"] = state
	}
	for sec, msg := range v.Errors {
		h.log.Warn("dash_read_failed", "section", sec, "err", msg)
	}
	if err := fillCharts(&v, recs, by, now); err != nil {
		writeJSON(w, http.StatusInternalServerError, actionReply{Message: err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, v)
}

func (h *Handler) now() time.Time {
	if h.opts.Clock != nil {
		return h.opts.Clock()
	}
	return time.Now()
}

// dayStart is the start of t's UTC day.
func dayStart(t time.Time) time.Time { return t.UTC().Truncate(24 * time.Hour) }

// fillCharts computes every chart of v from recs.
func fillCharts(v *chartsView, recs []jobs.Record, by operator.BreakdownBy, now time.Time) error {
	day, hour := 24*time.Hour, time.Hour
	daysFrom := dayStart(now).AddDate(0, 0, -(chartDays - 1))
	hoursFrom := now.UTC().Truncate(hour).Add(-(chartHours - 1) * hour)

	perDay, err := operator.BreakdownSeries(recs, by, day, daysFrom, now)
	if err != nil {
		return err
	}
	v.Keys = topKeys(recs, by)
	for _, p := range perDay {
		d := spendDay{Start: p.Start, Micros: p.Total.Micros, Parts: make([]int64, len(v.Keys))}
		for _, row := range p.Rows {
			d.Parts[keyIndex(v.Keys, row.Key)] += row.Micros
		}
		v.SpendPerDay = append(v.SpendPerDay, d)
		v.CostPerDay = append(v.CostPerDay, costDay{Start: p.Start, Runs: p.Total.Runs, P90Micros: p.Total.P90Micros})
		v.Merged = append(v.Merged, mergedDay{Start: p.Start, PullRequests: p.Total.PullRequests,
			Merged: p.Total.Merged, Closed: p.Total.Closed})
	}

	perHour, err := operator.BreakdownSeries(recs, operator.ByOutcome, hour, hoursFrom, now)
	if err != nil {
		return err
	}
	v.Outcomes = outcomeKeys(perHour)
	waits := make([][]int64, len(perHour))
	for _, r := range recs {
		if r.Timings == nil || r.EndedAt.Before(hoursFrom) || r.EndedAt.After(now) {
			continue
		}
		i := int(r.EndedAt.Sub(hoursFrom) / hour)
		waits[i] = append(waits[i], r.Timings.QueuedMs)
	}
	for i, p := range perHour {
		h := runsHour{Start: p.Start, Runs: p.Total.Attempts, Parts: make([]int, len(v.Outcomes))}
		for _, row := range p.Rows {
			h.Parts[slices.Index(v.Outcomes, row.Key)] += row.Attempts
		}
		v.RunsPerHour = append(v.RunsPerHour, h)
		v.QueueWait = append(v.QueueWait, waitHour{Start: p.Start, Runs: len(waits[i]),
			P50Ms: operator.NearestRank(waits[i], 50), P90Ms: operator.NearestRank(waits[i], 90)})
	}
	return nil
}

// topKeys are the chartKeys keys of the largest spend over recs, then
// otherKey when more keys spent.
func topKeys(recs []jobs.Record, by operator.BreakdownBy) []string {
	rows, _, _ := operator.Breakdown(recs, by) // by is one of chartGroupings
	keys := []string{}
	for i, row := range rows {
		if i == chartKeys {
			keys = append(keys, otherKey)
			break
		}
		keys = append(keys, row.Key)
	}
	return keys
}

func keyIndex(keys []string, key string) int {
	if i := slices.Index(keys, key); i >= 0 {
		return i
	}
	return len(keys) - 1 // otherKey
}

// outcomeKeys are the outcomes of the hours, in a fixed order first.
func outcomeKeys(points []operator.SeriesPoint) []string {
	keys := []string{jobs.OutcomeCompleted, jobs.OutcomePolicy, jobs.OutcomeFailed}
	for _, p := range points {
		for _, row := range p.Rows {
			if !slices.Contains(keys, row.Key) {
				keys = append(keys, row.Key)
			}
		}
	}
	return keys
}

func isRecordReader(src Source) bool {
	_, ok := src.(RecordReader)
	return ok
}

func isCapacityReader(src Source) bool {
	_, ok := src.(CapacityReader)
	return ok
}
