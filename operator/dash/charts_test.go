package dash

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pidispatch/pidispatch/jobs"
	"github.com/pidispatch/pidispatch/operator"
)

// chartNow is the charts' clock in these tests: 15:30 UTC on 10 March.
var chartNow = time.Date(2026, 3, 10, 15, 30, 0, 0, time.UTC)

const (
	prMerged = "https://forge.example/acme/web/pull/1"
	prClosed = "https://forge.example/acme/web/pull/2"
	prOpen   = "https://forge.example/acme/api/pull/3"
)

// chartRec is a valid record of one run: its repository, trigger, model,
// cost, outcome, end, queue wait and pull request.
func chartRec(id, repo, trigger, model string, micros int64, outcome string, end time.Time, queuedMs int64, pr string) jobs.Record {
	exit := 0
	reason := jobs.ReasonCompleted
	switch outcome {
	case jobs.OutcomeFailed:
		reason = jobs.ReasonExit1
	case jobs.OutcomePolicy:
		reason = jobs.ReasonOverBudget
	}
	provider, name, _ := strings.Cut(model, "/")
	return jobs.Record{JobID: id, Queue: "pi-jobs", Kind: jobs.KindForge, Target: repo, Trigger: trigger, Flow: "fix",
		StartedAt: end.Add(-time.Minute), EndedAt: end, Outcome: outcome, Reason: reason, ExitCode: &exit,
		Attempt: 1, Host: "alpha", Image: "pi-job:test", PullRequestURL: pr,
		Timings: &jobs.Timings{QueuedMs: queuedMs, AgentMs: 60_000},
		Spend: &jobs.Spend{Micros: micros, Dollars: jobs.USD(micros), Basis: jobs.BasisMetered, Calls: 1,
			Models: []jobs.ModelSpend{{Provider: provider, Model: name, Calls: 1, Micros: micros}}}}
}

// chartRecords are five runs with known sums: by repository 2.5 dollars on
// acme/api and 2.1 on acme/web; on 10 March 1.75 (web 1.25, api 0.5), on 9
// March 2.75 (web 0.75, api 2); queue waits of 4 s and 60 s in the 14:00
// hour of 10 March; three pull requests: merged (10 March), closed and
// still open (9 March).
func chartRecords() []jobs.Record {
	d10, d9 := time.Date(2026, 3, 10, 0, 0, 0, 0, time.UTC), time.Date(2026, 3, 9, 0, 0, 0, 0, time.UTC)
	return []jobs.Record{
		chartRec("r1", "acme/web", "issue-fix", "anthropic/claude-x", 1_250_000, jobs.OutcomeCompleted, d10.Add(14*time.Hour+10*time.Minute), 4000, prMerged),
		chartRec("r2", "acme/api", "nightly", "openai/gpt-y", 500_000, jobs.OutcomeFailed, d10.Add(14*time.Hour+40*time.Minute), 60_000, ""),
		chartRec("r3", "acme/web", "issue-fix", "anthropic/claude-x", 750_000, jobs.OutcomeCompleted, d9.Add(10*time.Hour), 2000, prClosed),
		chartRec("r4", "acme/api", "issue-fix", "anthropic/claude-x", 2_000_000, jobs.OutcomePolicy, d9.Add(11*time.Hour), 3000, prOpen),
		chartRec("r5", "acme/web", "nightly", "openai/gpt-y", 100_000, jobs.OutcomeCompleted, time.Date(2026, 3, 1, 8, 0, 0, 0, time.UTC), 1000, ""),
	}
}

// chartFake is the fake Source that also reads records and capacity.
type chartFake struct {
	*fake
	mu       sync.Mutex
	recs     []jobs.Record
	since    time.Time
	capacity operator.CapacityReport
	capErr   error
}

func (f *chartFake) Records(_ context.Context, since time.Time) ([]jobs.Record, string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.since = since
	var out []jobs.Record
	for _, r := range f.recs {
		if r.EndedAt.After(since) {
			out = append(out, r)
		}
	}
	return out, "", f.fail(secRuns)
}

func (f *chartFake) Capacity(context.Context) (operator.CapacityReport, error) {
	return f.capacity, f.capErr
}

// fakeOutcomes is the pull request store: what it knows, and the URLs it
// was asked.
type fakeOutcomes struct {
	mu     sync.Mutex
	known  map[string]jobs.PullRequestOutcome
	asked  []string
	failed error
}

func (o *fakeOutcomes) Outcomes(_ context.Context, urls []string) (map[string]jobs.PullRequestOutcome, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.asked = append(o.asked, urls...)
	out := map[string]jobs.PullRequestOutcome{}
	for _, u := range urls {
		if x, ok := o.known[u]; ok {
			out[u] = x
		}
	}
	return out, o.failed
}

func sampleOutcomes() *fakeOutcomes {
	at := chartNow.Add(-time.Hour)
	return &fakeOutcomes{known: map[string]jobs.PullRequestOutcome{
		prMerged: {State: jobs.PullRequestMerged, UpdatedAt: at},
		prClosed: {State: jobs.PullRequestClosed, UpdatedAt: at},
		// A store answer that does not validate is not joined.
		prOpen: {State: "merged-by-magic", UpdatedAt: at},
	}}
}

func sampleCapacity() operator.CapacityReport {
	drain, zero := int64(75*60*1000), int64(0)
	return operator.CapacityReport{At: chartNow, WindowMs: 3_600_000, Slots: 5, Busy: 1, BusyShare: 0.2,
		Waiting: 5, Delayed: 1, Finished: 4, PerHour: 4, DrainMs: &drain, Runs: "mirror",
		Hosts: []operator.HostCapacity{
			{Name: "alpha", Slots: 2, Busy: 1, BusyShare: 0.5, Waiting: 3, Finished: 3, PerHour: 3, DrainMs: &drain},
			{Name: "beta", Slots: 3, Finished: 1, PerHour: 1, DrainMs: &zero},
		},
		Queues: []operator.QueueCapacity{{Queue: "pi-jobs", Waiting: 2, Delayed: 1, Active: 1}}}
}

func chartSource() *chartFake {
	return &chartFake{fake: sampleFake(), recs: chartRecords(), capacity: sampleCapacity()}
}

func chartOptions(prs PullRequestOutcomes) Options {
	return Options{PullRequests: prs, Clock: func() time.Time { return chartNow }}
}

func readCharts(t *testing.T, url string) chartsView {
	t.Helper()
	resp, body := get(t, url)
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	var v chartsView
	require.NoError(t, json.Unmarshal([]byte(body), &v))
	return v
}

func point[P any](t *testing.T, points []P, start func(P) time.Time, at time.Time) P {
	t.Helper()
	for _, p := range points {
		if start(p).Equal(at) {
			return p
		}
	}
	t.Fatalf("no point at %s", at)
	var zero P
	return zero
}

// The charts' endpoint sums the seeded records exactly: spend per day
// stacked by repository, runs per hour by outcome, queue wait percentiles,
// the queue depth now, p90 cost per day and the merged share, with the
// pull request outcomes joined from the store.
func TestChartsEndpointSumsTheRecords(t *testing.T) {
	for _, r := range chartRecords() {
		require.NoError(t, r.Validate(), "the seeds are records a worker could write")
	}
	src := chartSource()
	prs := sampleOutcomes()
	srv := serve(t, src, chartOptions(prs))
	v := readCharts(t, srv.URL+"/api/charts")

	require.Equal(t, "repo", v.By)
	require.Empty(t, v.Errors)
	require.True(t, v.Joined)
	require.Equal(t, time.Date(2026, 2, 25, 0, 0, 0, 0, time.UTC).Add(-time.Millisecond), src.since, "14 days read")
	require.ElementsMatch(t, []string{prMerged, prClosed, prOpen}, prs.asked)

	require.Equal(t, []string{"acme/api", "acme/web"}, v.Keys, "largest spend first")
	require.Len(t, v.SpendPerDay, 14)
	day := func(d spendDay) time.Time { return d.Start }
	d10 := point(t, v.SpendPerDay, day, time.Date(2026, 3, 10, 0, 0, 0, 0, time.UTC))
	require.Equal(t, spendDay{Start: d10.Start, Micros: 1_750_000, Parts: []int64{500_000, 1_250_000}}, d10)
	d9 := point(t, v.SpendPerDay, day, time.Date(2026, 3, 9, 0, 0, 0, 0, time.UTC))
	require.Equal(t, []int64{2_000_000, 750_000}, d9.Parts)
	var total int64
	for _, d := range v.SpendPerDay {
		total += d.Micros
	}
	require.Equal(t, int64(4_600_000), total)

	require.Len(t, v.RunsPerHour, 48)
	require.Equal(t, []string{"completed", "policy", "failed"}, v.Outcomes)
	hr := func(h runsHour) time.Time { return h.Start }
	h14 := point(t, v.RunsPerHour, hr, time.Date(2026, 3, 10, 14, 0, 0, 0, time.UTC))
	require.Equal(t, []int{1, 0, 1}, h14.Parts)
	require.Equal(t, 2, h14.Runs)
	require.Equal(t, []int{0, 1, 0}, point(t, v.RunsPerHour, hr, time.Date(2026, 3, 9, 11, 0, 0, 0, time.UTC)).Parts)

	w14 := point(t, v.QueueWait, func(w waitHour) time.Time { return w.Start }, time.Date(2026, 3, 10, 14, 0, 0, 0, time.UTC))
	require.Equal(t, waitHour{Start: w14.Start, Runs: 2, P50Ms: 4000, P90Ms: 60_000}, w14)
	require.NotNil(t, v.QueueDepth)
	require.Equal(t, int64(3), *v.QueueDepth, "the sample's queues hold 3 ready jobs")

	cost := func(c costDay) time.Time { return c.Start }
	require.Equal(t, int64(1_250_000), point(t, v.CostPerDay, cost, d10.Start).P90Micros)
	require.Equal(t, int64(2_000_000), point(t, v.CostPerDay, cost, d9.Start).P90Micros)

	merged := func(m mergedDay) time.Time { return m.Start }
	require.Equal(t, mergedDay{Start: d10.Start, PullRequests: 1, Merged: 1}, point(t, v.Merged, merged, d10.Start))
	require.Equal(t, mergedDay{Start: d9.Start, PullRequests: 2, Closed: 1}, point(t, v.Merged, merged, d9.Start))

	// By model and by trigger, the same money.
	v = readCharts(t, srv.URL+"/api/charts?by=model")
	require.Equal(t, []string{"anthropic/claude-x", "openai/gpt-y"}, v.Keys)
	require.Equal(t, []int64{1_250_000, 500_000}, point(t, v.SpendPerDay, day, d10.Start).Parts)
	v = readCharts(t, srv.URL+"/api/charts?by=trigger")
	require.Equal(t, []string{"issue-fix", "nightly"}, v.Keys)
	require.Equal(t, []int64{2_750_000, 0}, point(t, v.SpendPerDay, day, d9.Start).Parts)

	resp, body := get(t, srv.URL+"/api/charts?by=host")
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Contains(t, body, "repo, trigger or model")
}

// Without a pull request store nothing is joined, and the merged share says
// so; a store that fails is named, the rest still charted.
func TestChartsWithoutOrWithAFailingStore(t *testing.T) {
	srv := serve(t, chartSource(), chartOptions(nil))
	v := readCharts(t, srv.URL+"/api/charts")
	require.False(t, v.Joined)
	d10 := time.Date(2026, 3, 10, 0, 0, 0, 0, time.UTC)
	m := point(t, v.Merged, func(m mergedDay) time.Time { return m.Start }, d10)
	require.Equal(t, mergedDay{Start: d10, PullRequests: 1}, m, "published, outcome unknown")

	prs := sampleOutcomes()
	prs.failed = errors.New("store down")
	srv = serve(t, chartSource(), chartOptions(prs))
	v = readCharts(t, srv.URL+"/api/charts")
	require.False(t, v.Joined)
	require.Equal(t, "unreachable (store down)", v.Errors["pullRequests"])
	require.Equal(t, int64(1_750_000), point(t, v.SpendPerDay, func(d spendDay) time.Time { return d.Start }, d10).Micros)
}

// More than chartKeys repositories: the smallest are summed as (other),
// and the day's parts still add up to its total.
func TestChartsStackAtMostEightKeys(t *testing.T) {
	src := chartSource()
	src.recs = nil
	end := chartNow.Add(-time.Hour)
	for i := range 11 {
		src.recs = append(src.recs, chartRec("k"+string(rune('a'+i)), "acme/r"+string(rune('a'+i)), "t", "p/m",
			int64(1000*(i+1)), jobs.OutcomeCompleted, end, 0, ""))
	}
	srv := serve(t, src, chartOptions(nil))
	v := readCharts(t, srv.URL+"/api/charts")
	require.Len(t, v.Keys, 9)
	require.Equal(t, "acme/rk", v.Keys[0])
	require.Equal(t, otherKey, v.Keys[8])
	last := v.SpendPerDay[len(v.SpendPerDay)-1]
	require.Equal(t, int64(1000+2000+3000), last.Parts[8], "the three smallest")
	var sum int64
	for _, p := range last.Parts {
		sum += p
	}
	require.Equal(t, last.Micros, sum)
	require.Equal(t, int64(66_000), sum)
}

// The capacity endpoint answers the source's report; a source that reads
// neither records nor capacity has no such endpoints, and its page loads no
// chart script.
func TestCapacityEndpointAndOptionalSections(t *testing.T) {
	src := chartSource()
	srv := serve(t, src, chartOptions(nil))
	resp, body := get(t, srv.URL+"/api/capacity")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var rep operator.CapacityReport
	require.NoError(t, json.Unmarshal([]byte(body), &rep))
	require.Equal(t, sampleCapacity(), rep)
	_, page := get(t, srv.URL+"/")
	require.Contains(t, page, `src="static/charts.js"`)
	require.Contains(t, page, `id="chart-spend"`)
	require.Contains(t, page, `id="capacity-summary"`)

	src.capErr = errors.New("registry unreachable")
	resp, body = get(t, srv.URL+"/api/capacity")
	require.Equal(t, http.StatusInternalServerError, resp.StatusCode)
	require.Contains(t, body, "registry unreachable")

	plain := serve(t, sampleFake(), Options{})
	for _, path := range []string{"/api/charts", "/api/capacity"} {
		resp, _ := get(t, plain.URL+path)
		require.Equal(t, http.StatusNotFound, resp.StatusCode, path)
	}
	_, page = get(t, plain.URL+"/")
	require.NotContains(t, page, "charts.js")
	require.NotContains(t, page, "chart-spend")

	// Without the session, neither answers.
	resp, _ = getWith(t, srv.URL+"/api/charts", "")
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	resp, _ = getWith(t, srv.URL+"/api/capacity", "")
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
}
