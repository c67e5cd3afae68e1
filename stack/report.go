package stack

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pidispatch/pidispatch/config"
	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/gateway"
	"github.com/pidispatch/pidispatch/observe/notify"
	"github.com/pidispatch/pidispatch/observe/tracing"
	"github.com/pidispatch/pidispatch/observe/transcript"
)

// report is what a worker keeps and tells about its jobs: the transcripts
// (beside the records and live in Valkey), the failure hook and webhook,
// and the traces (docs/logs-and-notifications.md).
type report struct {
	transcripts *transcript.Store
	notifier    *notify.Notifier // nil without PI_ON_FAILURE and PI_NOTIFY_URL
	tracer      *tracing.Tracer  // nil without an OTLP endpoint
	dir         string
}

// newReport builds the parts cfg.Report asks for. A hook that is not an
// executable file refuses boot.
func newReport(ctx context.Context, cfg config.Config, rc redis.UniversalClient, tune dispatch.Tuning) (*report, error) {
	r := &report{dir: cfg.LogsDir}
	var err error
	r.transcripts, err = transcript.NewStore(transcript.Config{
		Dir: cfg.LogsDir, MaxBytes: cfg.Report.TranscriptMax(),
		Live:   transcript.NewLiveWith(rc, transcript.LiveConfig{Key: cfg.FleetKey, Logger: tune.Logger}),
		Logger: tune.Logger, Host: cfg.WorkerName,
	})
	if err != nil {
		return nil, err
	}
	if cfg.Report.OnFailure != "" || cfg.Report.NotifyURL != "" {
		r.notifier, err = notify.New(notify.Config{
			Hook: cfg.Report.OnFailure, HookTimeout: cfg.Report.OnFailureTimeoutOr(), URL: cfg.Report.NotifyURL,
			Host: cfg.WorkerName, Logger: tune.Logger,
		})
		if err != nil {
			return nil, &config.ConfigError{Var: "PI_ON_FAILURE", Value: cfg.Report.OnFailure, Rule: err.Error()}
		}
	}
	if cfg.Report.OTLPEndpoint != "" {
		r.tracer, err = tracing.NewOTLP(ctx, cfg.WorkerName, tune.Version)
		if err != nil {
			return nil, &config.ConfigError{Var: "OTEL_EXPORTER_OTLP_ENDPOINT", Value: cfg.Report.OTLPEndpoint, Rule: err.Error()}
		}
	}
	return r, nil
}

// wire adds the parts to deps.
func (r *report) wire(deps *dispatch.Deps) {
	deps.Transcripts = r.transcripts
	if r.notifier != nil {
		deps.Observers = append(deps.Observers, r.notifier)
		deps.Background = append(deps.Background, r.notifier)
	}
	if r.tracer != nil {
		deps.Observers = append(deps.Observers, r.tracer)
	}
}

// onCall is the gateway's per-call hook: the call goes into the job's
// transcript and, with traces on, becomes a span.
func (r *report) onCall(c gateway.CallEvent) {
	r.transcripts.ModelCall(c.JobID, c.Attempt, transcript.Call{
		Provider: c.Provider, Model: c.Model, Status: c.Status,
		Input: c.Usage.Input, Output: c.Usage.Output, CacheRead: c.Usage.CacheRead, CacheWrite: c.Usage.CacheWrite,
		Micros: c.Micros, Estimated: c.Estimated, Millis: c.End.Sub(c.Start).Milliseconds(),
	}, c.End)
	if r.tracer != nil {
		r.tracer.ModelCall(c)
	}
}

// limits tells the notifier of each provider suspension the gateway records.
func (r *report) limits(l gateway.RateLimits) gateway.RateLimits {
	if r.notifier == nil || l == nil {
		return l
	}
	return notifyingLimits{RateLimits: l, n: r.notifier}
}

// close flushes the traces.
func (r *report) close(ctx context.Context) error {
	if r == nil || r.tracer == nil {
		return nil
	}
	return r.tracer.Shutdown(ctx)
}

type notifyingLimits struct {
	gateway.RateLimits
	n *notify.Notifier
}

func (l notifyingLimits) Suspend(ctx context.Context, provider string, until time.Time, why string) error {
	err := l.RateLimits.Suspend(ctx, provider, until, why)
	l.n.ProviderSuspended(provider, until)
	return err
}
