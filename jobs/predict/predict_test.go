package predict_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/pidispatch/pidispatch/jobs"
	"github.com/pidispatch/pidispatch/jobs/predict"
)

var t0 = time.Date(2026, 11, 2, 9, 0, 0, 0, time.UTC)

// rec is one attempt of job id that spent micros in a container.
func rec(id string, attempt int, trigger, flow, repo string, micros int64) jobs.Record {
	code := 0
	return jobs.Record{JobID: id, Queue: "pi-jobs", Attempt: attempt, Trigger: trigger, Flow: flow, Target: repo,
		StartedAt: t0, EndedAt: t0.Add(time.Minute), ExitCode: &code, Spend: &jobs.Spend{Micros: micros}}
}

// runs makes n one-attempt runs, the i-th costing cost(i).
func runs(prefix string, n int, trigger, flow, repo string, cost func(i int) int64) []jobs.Record {
	var out []jobs.Record
	for i := range n {
		out = append(out, rec(fmt.Sprintf("%s-%d", prefix, i), 1, trigger, flow, repo, cost(i)))
	}
	return out
}

func TestNarrowestBasisWithEnoughRuns(t *testing.T) {
	var recs []jobs.Record
	// 20 runs of nightly/fix on acme/a: 1..20 dollars.
	recs = append(recs, runs("a", 20, "nightly", "fix", "acme/a", func(i int) int64 { return int64(i+1) * 1_000_000 })...)
	// 5 runs on acme/b, all $100: too few for a repository basis of their own.
	recs = append(recs, runs("b", 5, "nightly", "fix", "acme/b", func(int) int64 { return 100_000_000 })...)
	// 10 review runs, too few for trigger+flow.
	recs = append(recs, runs("r", 10, "nightly", "review", "acme/a", func(int) int64 { return 2_000_000 })...)
	tab := predict.Build(recs, 0)

	p, ok := tab.Predict("nightly", "fix", "acme/a")
	if !ok || p.Basis != predict.BasisRepo || p.Runs != 20 || p.P90Micros != 18_000_000 || p.ExpectedMicros != 10_500_000 {
		t.Fatalf("acme/a: %+v %v, want trigger+flow+repo over 20 runs, p90 $18, mean $10.50", p, ok)
	}
	// acme/b falls back to trigger+flow: 25 runs.
	p, ok = tab.Predict("nightly", "fix", "acme/b")
	if !ok || p.Basis != predict.BasisFlow || p.Runs != 25 || p.P90Micros != 100_000_000 {
		t.Fatalf("acme/b: %+v %v, want trigger+flow over 25 runs, p90 $100", p, ok)
	}
	// review falls back to the trigger: 35 runs.
	p, ok = tab.Predict("nightly", "review", "acme/a")
	if !ok || p.Basis != predict.BasisTrigger || p.Runs != 35 {
		t.Fatalf("review: %+v %v, want the trigger over 35 runs", p, ok)
	}
	if _, ok := tab.Predict("weekly", "fix", "acme/a"); ok {
		t.Fatal("a trigger without history predicted")
	}
	if _, ok := tab.Predict("", "fix", "acme/a"); ok {
		t.Fatal("a job of no trigger predicted")
	}
}

func TestTooLittleHistoryPredictsNothing(t *testing.T) {
	tab := predict.Build(runs("a", 19, "nightly", "fix", "acme/a", func(int) int64 { return 4_000_000 }), 20)
	if p, ok := tab.Predict("nightly", "fix", "acme/a"); ok {
		t.Fatalf("19 runs predicted %+v; the minimum is 20", p)
	}
	tab = predict.Build(runs("a", 3, "nightly", "fix", "acme/a", func(int) int64 { return 4_000_000 }), 3)
	if p, ok := tab.Predict("nightly", "fix", "acme/a"); !ok || p.Runs != 3 {
		t.Fatalf("a minimum of 3 over 3 runs: %+v %v", p, ok)
	}
}

// A run is all its attempts: two attempts of $2 are one $4 run, and a run
// refused at a gate (no container, no spend) is left out.
func TestRunSumsItsAttemptsAndSkipsRefusals(t *testing.T) {
	var recs []jobs.Record
	for i := range 20 {
		id := fmt.Sprintf("j-%d", i)
		recs = append(recs, rec(id, 1, "nightly", "fix", "acme/a", 2_000_000), rec(id, 2, "nightly", "fix", "acme/a", 2_000_000))
	}
	for i := range 50 {
		recs = append(recs, jobs.Record{JobID: fmt.Sprintf("refused-%d", i), Queue: "pi-jobs", Trigger: "nightly", Flow: "fix", Target: "acme/a",
			Outcome: jobs.OutcomePolicy, Reason: jobs.ReasonDollarCap, StartedAt: t0, EndedAt: t0})
	}
	p, ok := predict.Build(recs, 20).Predict("nightly", "fix", "acme/a")
	if !ok || p.Runs != 20 || p.ExpectedMicros != 4_000_000 || p.P90Micros != 4_000_000 {
		t.Fatalf("%+v %v, want 20 runs of $4", p, ok)
	}
	// The same job id on another queue is another run.
	other := rec("j-0", 1, "nightly", "fix", "acme/a", 1)
	other.Queue = "pi-jobs@b"
	if p, _ := predict.Build(append(recs, other), 20).Predict("nightly", "fix", "acme/a"); p.Runs != 21 {
		t.Fatalf("runs %d, want 21", p.Runs)
	}
}

func TestNilTablePredictsNothing(t *testing.T) {
	var tab *predict.Table
	if _, ok := tab.Predict("nightly", "fix", "acme/a"); ok {
		t.Fatal("nil table predicted")
	}
}
