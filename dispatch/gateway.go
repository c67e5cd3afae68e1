package dispatch

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/pidispatch/pidispatch/jobs"
)

// gatewayOn reports whether jobs get the gateway's socket.
func (w *Worker) gatewayOn() bool { return w.deps.Gateway != nil && !w.cfg.Gateway.Off }

// isProviderKeyVar reports whether name is one of ProviderKeyVars.
func isProviderKeyVar(name string) bool {
	for _, v := range ProviderKeyVars {
		if v == name {
			return true
		}
	}
	return false
}

// gatewayJob is the session's view of h: the host's keys, overridden by the
// keys the job's secrets profile printed, and the job's caps.
func (w *Worker) gatewayJob(h *held) GatewayJob {
	keys := make(map[string]string, len(w.cfg.Gateway.ProviderKeys))
	for p, k := range w.cfg.Gateway.ProviderKeys {
		keys[p] = k
	}
	for p, name := range ProviderKeyVars {
		if v := h.secrets[name]; v != "" {
			keys[p] = v
		}
	}
	return GatewayJob{JobID: h.job.ID, Attempt: h.rec.Attempt, Keys: keys, MaxMicros: w.jobCapMicros(h.spec), MaxTokens: w.cfg.Spend.MaxTokens}
}

// jobCapMicros is the job's dollar cap: PI_MAX_COST_USD, lowered by the
// job's own maxCostUsd (a job may ask for less, never for more). 0: none.
func (w *Worker) jobCapMicros(j jobs.Job) int64 {
	c := w.cfg.Spend.MaxCostMicros
	if j.MaxCostUSD != "" {
		if m, err := jobs.ParseUSD(j.MaxCostUSD); err == nil && m > 0 && (c == 0 || m < c) {
			c = m
		}
	}
	return c
}

// jobProvider is the provider a job's agent calls: its own, else the host's
// default.
func (w *Worker) jobProvider(j jobs.Job) string {
	if j.Provider != "" {
		return j.Provider
	}
	return w.cfg.Gateway.DefaultProvider
}

// spendOf is the spend the job's gateway session metered, for its record;
// nil when no call went through it. The run is over when it is asked, so it
// ends the session first: a call still in flight (the container stopped
// mid-answer) settles at its reservation rather than being read as nothing.
func spendOf(h *held) *jobs.Spend {
	if h.gw == nil {
		return nil
	}
	h.gw.Close()
	s := h.gw.Spend()
	if s.Calls == 0 && s.Refused == 0 {
		return nil
	}
	s.Dollars = jobs.USD(s.Micros) // one source: the micros
	return &s
}

// gateRateLimit defers a job whose provider answered "rate limited" with a
// reset time, fleet-wide, until that reset: starting it would only burn its
// clock against the limit. Not an attempt. A store that cannot be read lets
// the job on: the provider itself still enforces its limit.
func (w *Worker) gateRateLimit(ctx context.Context, h *held) verdict {
	if w.deps.RateLimits == nil || !w.gatewayOn() {
		return goOn
	}
	provider := w.jobProvider(h.spec)
	until, err := w.deps.RateLimits.SuspendedUntil(ctx, provider)
	if err != nil {
		h.log.Warn("rate_limits_unreadable", "provider", provider, "err", err)
		return goOn
	}
	wait := until.Sub(w.tune.Now())
	if wait <= 0 {
		return goOn
	}
	// A little jitter, so the deferred jobs of a fleet do not all start in
	// the same millisecond the limit resets.
	wait += time.Duration(rand.Int64N(int64(time.Second)))
	return deferFor(wait, jobs.RateLimitedOn(provider))
}

// gateDollars holds the job's dollar cap in the fleet's dollar windows
// before its container starts, and settles it to what the job spent once
// its handling ends. A window that cannot hold it refuses the job
// (dollar-cap); windows that cannot be read defer it (money fails closed).
func (w *Worker) gateDollars(ctx context.Context, h *held) verdict {
	var limit *ScopeLimit
	if l, ok := w.limits.Lookup(h.spec.Scope()); ok {
		limit = &l
	}
	if w.deps.Dollars == nil || !(w.cfg.Spend.DollarWindows() || limit != nil && limit.HasDollars()) {
		return goOn
	}
	micros := w.jobCapMicros(h.spec)
	res, err := w.deps.Dollars.ReserveDollars(ctx, h.job.ID, h.spec.Scope(), limit, micros, w.cfg.JobTimeout)
	if errors.Is(err, ErrBudgetCorrupt) {
		h.log.Error("budget_corrupt", "err", err, "fix", "repair or delete the named dollar window key; no job starts while it holds a value no fleet wrote")
		return refuseFor(jobs.ReasonBudgetCorrupt)
	}
	if err != nil {
		h.log.Warn("dollars_unreachable_deferred", "err", err)
		return deferFor(w.tune.UnreachableDeferral, jobs.ReasonDollarsUnreachable)
	}
	if !res.Granted {
		if p := h.predicted; p != nil {
			// A run of this kind likely costs more than the window has left:
			// it waits for the window to free rather than be refused.
			if left := max(res.CapMicros-res.UsedMicros, 0); p.P90Micros > left {
				return w.predictedOver(h, *p, left, res.Window)
			}
		}
		h.log.Info("dollars_refused", "window", res.Window, "usedUsd", jobs.FormatUSD(res.UsedMicros), "capUsd", jobs.FormatUSD(res.CapMicros), "reserveUsd", jobs.FormatUSD(micros))
		return refuseFor(jobs.ReasonDollarCap)
	}
	return verdict{act: actGoOn, release: func(bool) {
		spent := int64(0)
		if s := spendOf(h); s != nil {
			spent = s.Micros
		}
		if err := w.deps.Dollars.SettleDollars(context.WithoutCancel(ctx), res, spent); err != nil {
			h.log.Warn("dollars_settle_failed", "err", err)
		}
	}}
}
