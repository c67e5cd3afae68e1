package dispatch

import (
	"context"

	"github.com/pidispatch/pidispatch/jobs"
)

// CostPredictor predicts what a job will cost from the history of runs like
// it (package jobs/predict holds the rule; fleetstate.Predictor reads the
// fleet's run mirror for it).
type CostPredictor interface {
	// Predict is the expected and p90 cost per run of jobs of trigger, flow
	// and repo (a record's Target). false: too little history, and the job is
	// admitted by the plain caps. An error means the history could not be
	// read; the job is then admitted by the plain caps too.
	Predict(ctx context.Context, trigger, flow, repo string) (jobs.Prediction, bool, error)
}

// LimitJobCap names the job's own dollar cap as the limit a prediction did
// not fit (the others are the dollar windows' names).
const LimitJobCap = "job-cap"

// JobTrigger is the triggers.json entry that made j: a forge trigger, or the
// cron entry of a scheduler's run (schedulerID, the queue entry's scheduler,
// else the one the job data names); "" for a job no trigger made, or one
// whose name a record cannot hold (check.Name). The record's trigger and
// the prediction's history are both named by it, so they always agree.
func JobTrigger(j jobs.Job, schedulerID string) string {
	switch {
	case j.Trigger != "":
		return trigger(j.Trigger)
	case schedulerID != "":
		return trigger(schedulerID)
	}
	return trigger(j.SchedulerID)
}

// gatePredicted predicts the job's cost from the runs of its trigger, flow
// and repository. A job whose p90 is past its own dollar cap waits: it would
// likely be cut off at the cap mid-run with its money spent and nothing to
// show. The dollar gate compares the same p90 with what its windows have
// left. The prediction goes on the record. A trigger with too little
// history, or a history that cannot be read, leaves the job to the plain
// caps, which still bound every dollar.
func (w *Worker) gatePredicted(ctx context.Context, h *held) verdict {
	trigger := JobTrigger(h.spec, h.job.SchedulerID)
	if w.deps.Predictor == nil || w.cfg.Spend.PredictOff || trigger == "" {
		return goOn
	}
	p, ok, err := w.deps.Predictor.Predict(ctx, trigger, h.spec.Flow, h.spec.Target())
	if err != nil {
		h.log.Warn("predict_unreadable", "err", err)
		return goOn
	}
	if !ok {
		return goOn
	}
	h.predicted = &p
	h.rec.Predicted = &p
	if c := w.jobCapMicros(h.spec); c > 0 && p.P90Micros > c {
		return w.predictedOver(h, p, c, LimitJobCap)
	}
	return goOn
}

// predictedOver defers a job whose predicted p90 does not fit left, what
// limit (a dollar window, or the job's cap) has room for.
func (w *Worker) predictedOver(h *held, p jobs.Prediction, left int64, limit string) verdict {
	fix := "it starts once the window frees; PI_PREDICT_ADMISSION=off admits by the plain caps"
	if limit == LimitJobCap {
		fix = "raise the job's maxCostUsd or PI_MAX_COST_USD past the p90, or set PI_PREDICT_ADMISSION=off"
	}
	h.log.Info("predicted_over_budget", "limit", limit, "p90Usd", jobs.FormatUSD(p.P90Micros), "leftUsd", jobs.FormatUSD(left),
		"expectedUsd", jobs.FormatUSD(p.ExpectedMicros), "basis", p.Basis, "runs", p.Runs, "fix", fix)
	return deferFor(w.tune.PredictedDeferral, jobs.ReasonPredictedOverBudget)
}
