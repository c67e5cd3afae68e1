package operator_test

import (
	"errors"
	"testing"
	"time"

	"github.com/pidispatch/pidispatch/jobs"
	"github.com/pidispatch/pidispatch/operator"
)

func spendOf(models ...jobs.ModelSpend) *jobs.Spend {
	s := &jobs.Spend{Basis: jobs.BasisMetered, Models: models}
	for _, m := range models {
		s.Micros += m.Micros
		s.Calls += m.Calls
		s.Tokens.Input += m.Tokens.Input
	}
	s.Dollars = jobs.USD(s.Micros)
	return s
}

func TestBreakdownAddsUpExactly(t *testing.T) {
	at := time.Date(2026, 11, 3, 9, 0, 0, 0, time.UTC)
	rec := func(id string, attempt int, trigger string, s *jobs.Spend) jobs.Record {
		return jobs.Record{JobID: id, Queue: "pi-jobs", Attempt: attempt, Host: "h1", Target: "acme/app", Trigger: trigger,
			Flow: "fix", Outcome: jobs.OutcomeCompleted, Reason: jobs.ReasonCompleted,
			StartedAt: at, EndedAt: at.Add(time.Minute), Spend: s, Telemetry: []byte(`{"event":"exit","turns":3}`)}
	}
	a := jobs.ModelSpend{Provider: "anthropic", Model: "big", Calls: 1, Micros: 1_000_001, Tokens: jobs.SpendTokens{Input: 10}}
	b := jobs.ModelSpend{Provider: "openai", Model: "small", Calls: 1, Micros: 333_333, Tokens: jobs.SpendTokens{Input: 5}}
	merged := rec("j1", 1, "pi-comment", spendOf(a, b))
	merged.PullRequestURL = "https://forge.test/acme/app/pulls/1"
	merged.PullRequest = &jobs.PullRequestOutcome{State: jobs.PullRequestMerged, UpdatedAt: at}
	retry := rec("j2", 1, "pi-comment", spendOf(a))
	retry2 := rec("j2", 2, "pi-comment", spendOf(b))
	nightly := rec("j3", 1, "nightly", spendOf(b))
	old := rec("j4", 1, "", &jobs.Spend{Basis: jobs.BasisMetered, Micros: 7, Dollars: jobs.USD(7)})
	recs := []jobs.Record{merged, retry, retry2, nightly, old}

	for _, by := range operator.Groupings {
		rows, total, err := operator.Breakdown(recs, by)
		if err != nil {
			t.Fatal(err)
		}
		var micros, tokens int64
		for _, r := range rows {
			micros += r.Micros
			tokens += r.Tokens
		}
		if want := int64(1_000_001*2 + 333_333*3 + 7); micros != want || total.Micros != want {
			t.Errorf("by %s: rows sum %d, total %d, want %d", by, micros, total.Micros, want)
		}
		if tokens != total.Tokens || total.Tokens != 10*2+5*3 {
			t.Errorf("by %s: tokens rows %d total %d", by, tokens, total.Tokens)
		}
		if total.Runs != 4 || total.Attempts != 5 || total.Turns != 15 || total.WallMs != 5*60_000 {
			t.Errorf("by %s: total %+v", by, total)
		}
	}
	rows, _, _ := operator.Breakdown(recs, operator.ByTrigger)
	if rows[0].Key != "pi-comment" || rows[0].Runs != 2 || rows[0].Attempts != 3 || rows[0].Merged != 1 ||
		rows[0].MicrosPerMerged != rows[0].Micros || rows[0].P90Micros != 1_333_334 || rows[0].P50Micros != 1_333_334 {
		t.Errorf("pi-comment row: %+v", rows[0])
	}
	if rows[len(rows)-1].Key != operator.NoKey || rows[len(rows)-1].Micros != 7 {
		t.Errorf("untriggered row: %+v", rows[len(rows)-1])
	}
	byModel, _, _ := operator.Breakdown(recs, operator.ByModel)
	if byModel[0].Key != "anthropic/big" || byModel[0].Micros != 2_000_002 || byModel[0].Runs != 2 {
		t.Errorf("model rows: %+v", byModel)
	}
	if _, _, err := operator.Breakdown(recs, "colour"); !errors.Is(err, operator.ErrUnknownGrouping) {
		t.Errorf("unknown grouping: %v", err)
	}
	series, err := operator.BreakdownSeries(recs, operator.ByRepo, 24*time.Hour, at.Add(-48*time.Hour), at.Add(time.Hour))
	if err != nil || len(series) != 3 || series[2].Total.Micros != int64(1_000_001*2+333_333*3+7) || series[0].Total.Runs != 0 {
		t.Errorf("series: %v %+v", err, series)
	}
}

func TestNearestRank(t *testing.T) {
	for _, c := range []struct {
		in   []int64
		p    int
		want int64
	}{{nil, 90, 0}, {[]int64{5}, 50, 5}, {[]int64{4, 1, 3, 2}, 50, 2}, {[]int64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 90, 9}, {[]int64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, 90, 10}} {
		if got := operator.NearestRank(c.in, c.p); got != c.want {
			t.Errorf("p%d of %v = %d, want %d", c.p, c.in, got, c.want)
		}
	}
}
