// Package predict says what a run is expected to cost from the history of
// runs like it: per trigger, flow and repository, falling back to trigger
// and flow, then to the trigger alone, whichever is the narrowest with
// enough runs. The worker's predicted admission and `explain` read the same
// table, so the figure that holds a job back is the figure shown for it.
// It is pure: it reads the records it is given.
package predict

import (
	"github.com/pidispatch/pidispatch/internal/percentile"
	"github.com/pidispatch/pidispatch/jobs"
)

// DefaultMinRuns is how many runs a basis needs before it predicts
// (PI_PREDICT_MIN_RUNS): fewer say too little about the next one.
const DefaultMinRuns = 20

// Bases of a prediction, narrowest first (jobs.Prediction.Basis).
const (
	BasisRepo    = "trigger+flow+repo"
	BasisFlow    = "trigger+flow"
	BasisTrigger = "trigger"
)

// Table holds the cost per run of every basis the history has. The zero
// value predicts nothing. A Table is read-only once built, so it is safe for
// concurrent use.
type Table struct {
	minRuns int
	stats   map[key]jobs.Prediction
}

type key struct{ basis, trigger, flow, repo string }

// run is one job's attempts summed.
type run struct {
	trigger, flow, repo string
	micros              int64
	ran                 bool
}

// Build reads recs into a Table whose bases need minRuns runs (less than 1:
// DefaultMinRuns). A run is one job on its queue, all its attempts summed;
// runs of no trigger, and runs where no attempt started a container or spent
// (a refusal at a gate costs nothing and says nothing of the next run), are
// left out.
func Build(recs []jobs.Record, minRuns int) *Table {
	if minRuns < 1 {
		minRuns = DefaultMinRuns
	}
	runs := map[[2]string]*run{}
	for _, r := range recs {
		id := [2]string{r.Queue, r.JobID}
		g := runs[id]
		if g == nil {
			g = &run{}
			runs[id] = g
		}
		if g.trigger == "" {
			g.trigger, g.flow, g.repo = r.Trigger, r.Flow, r.Target
		}
		if r.Spend != nil {
			g.micros += r.Spend.Micros
			g.ran = true
		}
		if r.ExitCode != nil {
			g.ran = true
		}
	}
	costs := map[key][]int64{}
	for _, g := range runs {
		if g.trigger == "" || !g.ran {
			continue
		}
		for _, k := range keys(g.trigger, g.flow, g.repo) {
			costs[k] = append(costs[k], g.micros)
		}
	}
	t := &Table{minRuns: minRuns, stats: make(map[key]jobs.Prediction, len(costs))}
	for k, c := range costs {
		if len(c) < minRuns {
			continue
		}
		var sum int64
		for _, m := range c {
			sum += m
		}
		n := int64(len(c))
		t.stats[k] = jobs.Prediction{
			ExpectedMicros: (sum + n/2) / n,
			P90Micros:      percentile.NearestRank(c, 90),
			Basis:          k.basis,
			Runs:           len(c),
		}
	}
	return t
}

// keys are a run's bases, narrowest first.
func keys(trigger, flow, repo string) []key {
	return []key{
		{BasisRepo, trigger, flow, repo},
		{BasisFlow, trigger, flow, ""},
		{BasisTrigger, trigger, "", ""},
	}
}

// Predict is the prediction of the narrowest basis with at least MinRuns
// runs for a job of trigger, flow and repo (a record's Target: owner/name,
// or local:<folder>). false: no basis has enough history (or no trigger):
// the job is admitted by the plain caps.
func (t *Table) Predict(trigger, flow, repo string) (jobs.Prediction, bool) {
	if t == nil || trigger == "" {
		return jobs.Prediction{}, false
	}
	for _, k := range keys(trigger, flow, repo) {
		if p, ok := t.stats[k]; ok {
			return p, true
		}
	}
	return jobs.Prediction{}, false
}

// MinRuns is the runs a basis needs to predict.
func (t *Table) MinRuns() int {
	if t == nil {
		return DefaultMinRuns
	}
	return t.minRuns
}
