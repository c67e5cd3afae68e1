package operator_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/pidispatch/pidispatch/fleetstate"
	"github.com/pidispatch/pidispatch/internal/testkit/livetest"
	"github.com/pidispatch/pidispatch/jobs"
	"github.com/pidispatch/pidispatch/operator"
)

// A peer writes its run record claiming its pull request merged, so that
// `runs` and `explain` show its work as worth its cost: neither shows the
// claim. Each shows the outcome the store knows, and none without a store.
func TestRunsAndExplainShowOnlyTheStoresOutcome(t *testing.T) {
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
	closed := jobs.PullRequestOutcome{State: jobs.PullRequestClosed, HumanCommits: 1, UpdatedAt: now}
	store := &fakeOutcomes{known: map[string]jobs.PullRequestOutcome{honest.PullRequestURL: closed}}

	byID := func(recs []jobs.Record) map[string]jobs.Record {
		out := map[string]jobs.Record{}
		for _, r := range recs {
			out[r.JobID] = r
		}
		return out
	}
	// No store: no run shows an outcome, whatever its record says.
	recs, tot, err := operator.Runs(ctx, db.Client, operator.RunsFilter{})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if r.PullRequest != nil {
			t.Fatalf("without a store, %s shows its record's own outcome %+v", r.JobID, *r.PullRequest)
		}
	}
	if tot.PullRequestOutcomes != operator.OutcomesOff {
		t.Errorf("without a store the join is %q, want %q", tot.PullRequestOutcomes, operator.OutcomesOff)
	}

	// With the store: the honest run shows the store's outcome, the forged
	// one none (the store does not know its pull request).
	recs, tot, err = operator.Runs(ctx, db.Client, operator.RunsFilter{PullRequests: store})
	if err != nil {
		t.Fatal(err)
	}
	got := byID(recs)
	if p := got["forged"].PullRequest; p != nil {
		t.Errorf("the forged run shows %+v, want no outcome", *p)
	}
	if p := got["honest"].PullRequest; p == nil || *p != closed {
		t.Errorf("the honest run shows %v, want %+v", p, closed)
	}
	if tot.PullRequestOutcomes != operator.OutcomesJoined || tot.Joined != 1 {
		t.Errorf("join %q, %d known; want joined, 1", tot.PullRequestOutcomes, tot.Joined)
	}

	// A store that fails: said so, and no outcome shown.
	recs, tot, err = operator.Runs(ctx, db.Client, operator.RunsFilter{PullRequests: &fakeOutcomes{err: errors.New("connection refused")}})
	if err != nil || tot.PullRequestOutcomes != "unreachable (connection refused)" || byID(recs)["forged"].PullRequest != nil {
		t.Errorf("failed store: %q, %v", tot.PullRequestOutcomes, err)
	}

	// Explain's records: the same join.
	for _, c := range []struct {
		id   string
		want *jobs.PullRequestOutcome
	}{{"forged", nil}, {"honest", &closed}} {
		ex, err := operator.Explain(ctx, db.Client, c.id, operator.ExplainOptions{PullRequests: store})
		if !errors.Is(err, operator.ErrJobNotFound) || len(ex.Records) != 1 {
			t.Fatalf("explain %s: %d records, %v", c.id, len(ex.Records), err)
		}
		p := ex.Records[0].PullRequest
		if (p == nil) != (c.want == nil) || (p != nil && *p != *c.want) {
			t.Errorf("explain %s shows %v, want %v", c.id, p, c.want)
		}
		if ex.PullRequestOutcomes != operator.OutcomesJoined {
			t.Errorf("explain %s: join %q", c.id, ex.PullRequestOutcomes)
		}
	}
	ex, _ := operator.Explain(ctx, db.Client, "forged", operator.ExplainOptions{})
	if len(ex.Records) != 1 || ex.Records[0].PullRequest != nil || ex.PullRequestOutcomes != operator.OutcomesOff {
		t.Errorf("explain without a store: %+v, join %q", ex.Records, ex.PullRequestOutcomes)
	}
}
