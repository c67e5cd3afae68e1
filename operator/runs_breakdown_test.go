package operator_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pidispatch/pidispatch/fleetstate"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/jobs"
	"github.com/pidispatch/pidispatch/operator"
)

// fakeOutcomes is a pull request outcome store: known outcomes, or err.
type fakeOutcomes struct {
	known map[string]jobs.PullRequestOutcome
	err   error
	asked [][]string
}

func (f *fakeOutcomes) Outcomes(_ context.Context, urls []string) (map[string]jobs.PullRequestOutcome, error) {
	f.asked = append(f.asked, urls)
	if f.err != nil {
		return nil, f.err
	}
	out := map[string]jobs.PullRequestOutcome{}
	for _, u := range urls {
		if o, ok := f.known[u]; ok {
			out[u] = o
		}
	}
	return out, nil
}

func prRecord(id, target string, micros int64, at time.Time, url string) jobs.Record {
	r := jobs.Record{JobID: id, Kind: jobs.KindForge, Target: target, Flow: "fix", StartedAt: at.Add(-time.Minute), EndedAt: at,
		Outcome: jobs.OutcomeCompleted, Reason: jobs.ReasonCompleted, Attempt: 1, Host: "alpha", Queue: "pi-jobs", PullRequestURL: url}
	if micros > 0 {
		r.Spend = &jobs.Spend{Micros: micros, Dollars: jobs.USD(micros), Basis: jobs.BasisMetered, Calls: 1}
	}
	return r
}

// A run's pull request counts as merged only when the outcome store says
// so. A peer that writes a record claiming its own pull request merged (to
// make its runs look worth their cost) is not believed.
func TestRunsBreakdownTrustsOnlyTheOutcomeStore(t *testing.T) {
	db := livetest.Valkey(t)
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Second)
	m := fleetstate.NewMirror(db.Client, fleetstate.MirrorConfig{})
	forged := prRecord("forged", "acme/web", 900_000, now.Add(-time.Hour), "https://forge.example/acme/web/pull/1")
	forged.PullRequest = &jobs.PullRequestOutcome{State: jobs.PullRequestMerged, UpdatedAt: now}
	honest := prRecord("honest", "acme/web", 100_000, now.Add(-2*time.Hour), "https://forge.example/acme/web/pull/2")
	for _, r := range []jobs.Record{forged, honest} {
		if err := m.Mirror(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	store := &fakeOutcomes{known: map[string]jobs.PullRequestOutcome{
		honest.PullRequestURL: {State: jobs.PullRequestMerged, UpdatedAt: now},
	}}
	rep, err := operator.RunsBreakdown(ctx, db.Client, operator.RunsFilter{}, operator.ByRepo, operator.BreakdownOptions{PullRequests: store})
	if err != nil {
		t.Fatal(err)
	}
	if tot := rep.Total; tot.PullRequests != 2 || tot.Merged != 1 || tot.MicrosPerMerged != 1_000_000 || rep.Joined != 1 ||
		rep.PullRequestOutcomes != operator.OutcomesJoined {
		t.Fatalf("total %+v, joined %d %q: want 2 pull requests, 1 merged (the store's), $1 per merged", tot, rep.Joined, rep.PullRequestOutcomes)
	}

	// Without a store, nothing merged, whatever the records say.
	rep, err = operator.RunsBreakdown(ctx, db.Client, operator.RunsFilter{}, operator.ByRepo, operator.BreakdownOptions{})
	if err != nil || rep.Total.Merged != 0 || rep.PullRequestOutcomes != operator.OutcomesOff {
		t.Fatalf("no store: %+v %v", rep, err)
	}
	// A store that fails is reported; the sums are still given.
	rep, err = operator.RunsBreakdown(ctx, db.Client, operator.RunsFilter{}, operator.ByRepo,
		operator.BreakdownOptions{PullRequests: &fakeOutcomes{err: errors.New("connection refused")}})
	if err != nil || rep.Total.Merged != 0 || rep.Total.Micros != 1_000_000 || rep.PullRequestOutcomes != "unreachable (connection refused)" {
		t.Fatalf("failed store: %+v %v", rep, err)
	}
}

// Predicted against actual: over the records that carry a prediction, each
// row sums and averages what was predicted and what was spent; by model a
// record's whole spend is its actual, in each row it is in.
func TestRunsBreakdownPredictedAgainstActual(t *testing.T) {
	dir := t.TempDir()
	now := time.Now().UTC().Truncate(time.Second)
	mk := func(id, target string, micros, predicted int64) jobs.Record {
		r := prRecord(id, target, micros, now.Add(-time.Hour), "")
		if predicted >= 0 {
			r.Predicted = &jobs.Prediction{ExpectedMicros: predicted, P90Micros: 2 * predicted, Basis: "trigger", Runs: 20}
		}
		return r
	}
	recs := []jobs.Record{mk("a", "acme/web", 300_000, 200_000), mk("b", "acme/web", 500_001, 400_000), mk("c", "acme/web", 70, -1), mk("d", "acme/api", 10, 0)}
	for _, r := range recs {
		if _, err := jobs.WriteRecord(dir, r); err != nil {
			t.Fatal(err)
		}
	}
	rep, err := operator.RunsBreakdown(context.Background(), nil, operator.RunsFilter{LogsDir: dir}, operator.ByRepo, operator.BreakdownOptions{})
	if err != nil || len(rep.Rows) != 2 || rep.Source != operator.RunsFromLogsDir {
		t.Fatalf("%+v %v", rep, err)
	}
	web := rep.Rows[0]
	want := operator.PredictionCheck{Records: 2, PredictedMicros: 600_000, ActualMicros: 800_001, MeanPredictedMicros: 300_000, MeanActualMicros: 400_000}
	if web.Key != "acme/web" || web.Predicted != want || web.Micros != 800_071 || web.Dollars != "0.800071" {
		t.Fatalf("acme/web: %+v, want predicted %+v", web, want)
	}
	if tot := rep.Total.Predicted; tot.Records != 3 || tot.PredictedMicros != 600_000 || tot.ActualMicros != 800_011 {
		t.Fatalf("total predicted %+v", tot)
	}
	// JSON carries the dollars exactly, six places, as a number.
	b, _ := json.Marshal(rep.Total)
	var back struct {
		Dollars json.Number `json:"dollars"`
		Micros  int64       `json:"micros"`
	}
	if err := json.Unmarshal(b, &back); err != nil || back.Dollars != "0.800081" || back.Micros != 800_081 {
		t.Fatalf("json %s: %v", b, err)
	}
	if _, err := operator.RunsBreakdown(context.Background(), nil, operator.RunsFilter{LogsDir: dir}, "colour", operator.BreakdownOptions{}); !errors.Is(err, operator.ErrUnknownGrouping) {
		t.Fatalf("bad grouping: %v", err)
	}
}

// More runs than one mirror read returns (fleetstate.MaxMirrorReadLimit)
// are all summed: Runs lists the newest ones and says the read was cut,
// RunsBreakdown reads the rest in pages.
func TestRunsBreakdownReadsPastOneMirrorRead(t *testing.T) {
	db := livetest.Valkey(t)
	ctx := context.Background()
	const n = fleetstate.MaxMirrorReadLimit + 500
	start := time.Now().UTC().Add(-20 * 24 * time.Hour).Truncate(time.Millisecond)
	m := fleetstate.NewMirror(db.Client, fleetstate.MirrorConfig{IndexMax: 2 * n})
	var want int64
	for i := range n {
		want += int64(1000 + i%997)
	}
	// Written by 8 writers at once, as a fleet's workers write.
	errs := make(chan error, 8)
	for w := range 8 {
		go func() {
			for i := w; i < n; i += 8 {
				r := prRecord(fmt.Sprintf("bulk-%05d", i), "acme/web", int64(1000+i%997), start.Add(time.Duration(i)*time.Minute), "")
				if err := m.Mirror(ctx, r); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range 8 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	_, tot, err := operator.Runs(ctx, db.Client, operator.RunsFilter{})
	if err != nil || tot.Runs != fleetstate.MaxMirrorReadLimit || tot.Degraded != fleetstate.MirrorTruncated {
		t.Fatalf("Runs: %+v %v; want the newest %d, truncated", tot, err, fleetstate.MaxMirrorReadLimit)
	}
	rep, err := operator.RunsBreakdown(ctx, db.Client, operator.RunsFilter{}, operator.ByRepo, operator.BreakdownOptions{MirrorIndexMax: 2 * n})
	if err != nil || rep.Records != n || rep.Total.Micros != want || rep.Degraded != "" {
		t.Fatalf("RunsBreakdown: %d records, %d micros, degraded %q, %v; want %d, %d", rep.Records, rep.Total.Micros, rep.Degraded, err, n, want)
	}
	// Read against the default cap, the same full index says runs may be missing.
	rep, err = operator.RunsBreakdown(ctx, db.Client, operator.RunsFilter{}, operator.ByRepo, operator.BreakdownOptions{})
	if err != nil || rep.Degraded != fleetstate.MirrorTruncated {
		t.Fatalf("default cap: degraded %q, %v", rep.Degraded, err)
	}
}

// Where the money went this month, by repository: the fleet's run mirror
// merged with this host's records, each run's pull request joined to its
// outcome (a fleetstate.PullRequests store).
func ExampleRunsBreakdown() {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer client.Close()
	var outcomes operator.PullRequestOutcomes // fleetstate.NewPullRequests(client)
	filter := operator.RunsFilter{Since: time.Now().Add(-30 * 24 * time.Hour), LogsDir: "/var/log/pi-dispatch"}
	rep, err := operator.RunsBreakdown(context.Background(), client, filter, operator.ByRepo, operator.BreakdownOptions{PullRequests: outcomes})
	if err != nil {
		return
	}
	for _, row := range rep.Rows {
		fmt.Printf("%s: $%s over %d runs, %d of %d pull requests merged\n", row.Key, row.Dollars, row.Runs, row.Merged, row.PullRequests)
	}
	fmt.Printf("total: $%s\n", rep.Total.Dollars)
}
