package operator

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pidispatch/pidispatch/config"
	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/fleetstate"
	"github.com/pidispatch/pidispatch/jobs"
)

// SpendSources are the explain sources of the gates that read fleetstate's
// spend stores: the provider's rate limit and the dollar windows, with cfg's
// caps and defaults.
func SpendSources(client redis.UniversalClient, cfg config.Config) []FindingSource {
	src := []FindingSource{rateLimitSource{limits: fleetstate.NewRateLimits(client, fleetstate.RateLimitsConfig{}), cfg: cfg}}
	dollars := fleetstate.NewDollars(client, fleetstate.DollarsConfig{
		DailyMicros: cfg.Spend.DailyCostMicros, WeeklyMicros: cfg.Spend.WeeklyCostMicros, MonthlyMicros: cfg.Spend.MonthlyCostMicros,
	})
	var predictor dispatch.CostPredictor
	if !cfg.Spend.PredictOff {
		predictor = fleetstate.NewPredictor(fleetstate.NewMirror(client, fleetstate.MirrorConfig{}), fleetstate.PredictorConfig{MinRuns: cfg.Spend.PredictMinRuns})
		src = append(src, predictedSource{predictor: predictor, dollars: dollars, cfg: cfg})
	}
	if cfg.Spend.DollarWindows() {
		src = append(src, dollarSource{dollars: dollars, predictor: predictor, cfg: cfg})
	}
	return src
}

// jobCap is the job's dollar cap as the worker reads it: PI_MAX_COST_USD,
// lowered by the job's own maxCostUsd.
func jobCap(cfg config.Config, spec *jobs.Job) int64 {
	want := cfg.Spend.MaxCostMicros
	if spec != nil && spec.MaxCostUSD != "" {
		if m, err := jobs.ParseUSD(spec.MaxCostUSD); err == nil && m > 0 && (want == 0 || m < want) {
			want = m
		}
	}
	return want
}

// predict is the worker's prediction for job; false when it makes none.
func predictJob(ctx context.Context, p dispatch.CostPredictor, job ExplainJob) (jobs.Prediction, bool, error) {
	if p == nil || job.Spec == nil {
		return jobs.Prediction{}, false, nil
	}
	trigger := dispatch.JobTrigger(*job.Spec, job.SchedulerID)
	if trigger == "" {
		return jobs.Prediction{}, false, nil
	}
	return p.Predict(ctx, trigger, job.Spec.Flow, job.Spec.Target())
}

// predictedSource says when the p90 cost of runs like the job does not fit
// what its cap or a dollar window has left, as the predicted and dollar
// gates would find: the job waits predicted-over-budget.
type predictedSource struct {
	predictor dispatch.CostPredictor
	dollars   *fleetstate.Dollars
	cfg       config.Config
}

func (predictedSource) Name() string { return "predicted admission" }

func (s predictedSource) Findings(ctx context.Context, job ExplainJob) ([]Finding, error) {
	p, ok, err := predictJob(ctx, s.predictor, job)
	if err != nil || !ok {
		return nil, err
	}
	left, limit, resets := jobCap(s.cfg, job.Spec), dispatch.LimitJobCap, time.Time{}
	if left == 0 || p.P90Micros <= left {
		left, limit = 0, ""
		ws, err := s.dollars.Windows(ctx)
		if err != nil {
			return nil, err
		}
		for _, w := range ws {
			if room := max(w.CapMicros-w.SpentMicros-w.ReservedMicros, 0); room < p.P90Micros && (limit == "" || room < left) {
				left, limit, resets = room, w.Name, w.ResetsAt
			}
		}
		if limit == "" {
			return nil, nil
		}
	}
	words := fmt.Sprintf("predicted over budget: runs like it (%s, %d runs) cost $%s at p90 and $%s on average, and %s has $%s left: the next worker defers it until it fits",
		p.Basis, p.Runs, jobs.FormatUSD(p.P90Micros), jobs.FormatUSD(p.ExpectedMicros), limitWords(limit), jobs.FormatUSD(left))
	data := map[string]any{"p90Usd": jobs.USD(p.P90Micros), "expectedUsd": jobs.USD(p.ExpectedMicros), "leftUsd": jobs.USD(left),
		"limit": limit, "basis": p.Basis, "runs": p.Runs}
	if limit == dispatch.LimitJobCap {
		words += "; raise its maxCostUsd or PI_MAX_COST_USD past the p90, or set PI_PREDICT_ADMISSION=off"
	} else {
		words += "; the window resets at " + fmtTime(resets)
		data["resetsAt"] = resets.UTC()
	}
	return []Finding{{Code: FindPredictedOver, Words: words, Data: data}}, nil
}

func limitWords(limit string) string {
	if limit == dispatch.LimitJobCap {
		return "its own cap"
	}
	return "dollar window " + limit
}

// rateLimitSource says when the job's provider is suspended, as the
// rate-limit gate reads it.
type rateLimitSource struct {
	limits dispatch.RateLimits
	cfg    config.Config
}

func (rateLimitSource) Name() string { return "rate limits" }

func (s rateLimitSource) Findings(ctx context.Context, job ExplainJob) ([]Finding, error) {
	if s.cfg.Gateway.Off {
		return nil, nil
	}
	provider := s.cfg.Gateway.DefaultProvider
	if job.Spec != nil && job.Spec.Provider != "" {
		provider = job.Spec.Provider
	}
	until, err := s.limits.SuspendedUntil(ctx, provider)
	if err != nil || !until.After(time.Now()) {
		return nil, err
	}
	return []Finding{{
		Code:  FindRateLimited,
		Words: fmt.Sprintf("provider %s is rate-limited until %s: the next worker defers it to then, without charging an attempt", provider, fmtTime(until)),
		Data:  map[string]any{"provider": provider, "until": until.UTC()},
	}}, nil
}

// dollarSource says when a global dollar window cannot hold the job's cap
// on top of what it holds, as the dollar gate would find.
type dollarSource struct {
	dollars   *fleetstate.Dollars
	predictor dispatch.CostPredictor // nil: predicted admission is off
	cfg       config.Config
}

func (dollarSource) Name() string { return "dollar windows" }

func (s dollarSource) Findings(ctx context.Context, job ExplainJob) ([]Finding, error) {
	ws, err := s.dollars.Windows(ctx)
	if err != nil {
		return nil, err
	}
	want := jobCap(s.cfg, job.Spec)
	// A window that cannot hold the predicted p90 either makes the job
	// wait, not be refused: predictedSource says so.
	p, predicted, _ := predictJob(ctx, s.predictor, job)
	var out []Finding
	for _, w := range ws {
		used := w.SpentMicros + w.ReservedMicros
		if used+want <= w.CapMicros || predicted && p.P90Micros > max(w.CapMicros-used, 0) {
			continue
		}
		out = append(out, Finding{
			Code: FindDollarsFull,
			Words: fmt.Sprintf("dollar window %s holds $%s of $%s and cannot take the job's $%s: the next worker refuses it dollar-cap; the window resets at %s",
				w.Name, jobs.FormatUSD(used), jobs.FormatUSD(w.CapMicros), jobs.FormatUSD(want), fmtTime(w.ResetsAt)),
			Data: map[string]any{"window": w.Name, "usedUsd": jobs.USD(used), "capUsd": jobs.USD(w.CapMicros), "jobCapUsd": jobs.USD(want), "resetsAt": w.ResetsAt.UTC()},
		})
	}
	return out, nil
}
