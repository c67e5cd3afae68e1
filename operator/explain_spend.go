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
	if cfg.Spend.DollarWindows() {
		src = append(src, dollarSource{dollars: fleetstate.NewDollars(client, fleetstate.DollarsConfig{
			DailyMicros: cfg.Spend.DailyCostMicros, WeeklyMicros: cfg.Spend.WeeklyCostMicros, MonthlyMicros: cfg.Spend.MonthlyCostMicros,
		}), cfg: cfg})
	}
	return src
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
	dollars *fleetstate.Dollars
	cfg     config.Config
}

func (dollarSource) Name() string { return "dollar windows" }

func (s dollarSource) Findings(ctx context.Context, job ExplainJob) ([]Finding, error) {
	ws, err := s.dollars.Windows(ctx)
	if err != nil {
		return nil, err
	}
	want := s.cfg.Spend.MaxCostMicros
	if job.Spec != nil && job.Spec.MaxCostUSD != "" {
		if m, err := jobs.ParseUSD(job.Spec.MaxCostUSD); err == nil && m > 0 && m < want {
			want = m
		}
	}
	var out []Finding
	for _, w := range ws {
		used := w.SpentMicros + w.ReservedMicros
		if used+want <= w.CapMicros {
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
