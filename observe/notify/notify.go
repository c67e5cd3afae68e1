// Package notify tells someone when a job fails or a limit is hit: it runs
// the operator's failure hook (PI_ON_FAILURE) and posts a small JSON event
// to a webhook (PI_NOTIFY_URL).
//
// A Notifier is a dispatch.Observer and a dispatch.Background: the worker's
// events are queued without blocking (a full queue drops the event, with a
// log line), and delivered by Run with retries and backoff. An event holds
// ids, outcomes, reasons, provider names and times: never a secret, a task
// or a job's output.
package notify

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/internal/sinktext"
	"github.com/pidispatch/pidispatch/jobs"
)

// Kinds of Event.
const (
	KindJobFailed         = "job-failed"
	KindCapHit            = "cap-hit"
	KindProviderSuspended = "provider-suspended"
	KindFleetPaused       = "fleet-paused"
	KindFleetResumed      = "fleet-resumed"
)

// Event is what a webhook receives, as JSON. Text is a plain line that
// Slack-style receivers show as the message.
type Event struct {
	// ID is the same for every delivery of one event (also the
	// Idempotency-Key header), so a receiver can drop a repeat.
	ID       string     `json:"id"`
	Kind     string     `json:"event"`
	At       time.Time  `json:"at"`
	Host     string     `json:"host"`
	JobID    string     `json:"jobId,omitempty"`
	Attempt  int        `json:"attempt,omitempty"`
	Outcome  string     `json:"outcome,omitempty"`
	Reason   string     `json:"reason,omitempty"`
	Provider string     `json:"provider,omitempty"`
	Until    *time.Time `json:"until,omitempty"`
	Text     string     `json:"text"`
}

// capReasons are the record reasons that mean a cap was hit.
var capReasons = map[jobs.Reason]bool{
	jobs.ReasonCostCap: true, jobs.ReasonTokenCap: true, jobs.ReasonDollarCap: true,
	jobs.ReasonOverBudget: true, jobs.ReasonScopeCap: true, jobs.ReasonSoftHold: true,
}

// Defaults of Config.
const (
	QueueDefault       = 256
	HookTimeoutDefault = 10 * time.Second
	PostTimeoutDefault = 30 * time.Second
	BackoffMinDefault  = time.Second
	BackoffMaxDefault  = 5 * time.Minute
	AttemptsDefault    = 10
	// parallel is how many events are delivered at once.
	parallel = 4
)

// Config tunes a Notifier. Hook or URL may be empty; with both empty the
// Notifier drops everything.
type Config struct {
	// Hook is the absolute path of the failure hook, run as
	// <Hook> <jobId> <outcome> <reason> <host> for each job-failed and
	// cap-hit event, with only PATH in its environment. A value starting
	// with - is passed with _ before it (sinktext.Arg).
	Hook string
	// HookTimeout bounds one run of Hook. Defaults to HookTimeoutDefault.
	HookTimeout time.Duration
	// URL receives each event as a JSON POST. It is never logged.
	URL string
	// PostTimeout bounds one POST. Defaults to PostTimeoutDefault: a slow
	// receiver is waited for rather than sent the event twice.
	PostTimeout time.Duration
	// Host is this worker's name, in every event and log line.
	Host string
	// Queue bounds the events waiting for delivery. Defaults to QueueDefault.
	Queue int
	// Attempts bounds the deliveries of one event to one receiver, with
	// backoff from BackoffMin doubling to BackoffMax between them.
	Attempts               int
	BackoffMin, BackoffMax time.Duration
	// Client posts the events; nil: a plain http.Client.
	Client *http.Client
	Logger *slog.Logger
	// Now is the clock; nil: time.Now.
	Now func() time.Time
}

// Notifier delivers events to the hook and the webhook.
type Notifier struct {
	cfg Config
	log *slog.Logger
	ch  chan Event

	mu        sync.Mutex
	suspended map[string]time.Time // provider -> the until last notified
}

var (
	_ dispatch.Observer   = (*Notifier)(nil)
	_ dispatch.Background = (*Notifier)(nil)
)

// ErrConfig is a Config New refuses.
var ErrConfig = errors.New("notify config")

// New checks cfg: a hook must be an executable regular file.
func New(cfg Config) (*Notifier, error) {
	if cfg.Hook != "" {
		fi, err := os.Stat(cfg.Hook)
		switch {
		case err != nil:
			return nil, fmt.Errorf("%w: hook %s: %w", ErrConfig, cfg.Hook, err)
		case !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0:
			return nil, fmt.Errorf("%w: hook %s must be an executable file (chmod +x)", ErrConfig, cfg.Hook)
		}
	}
	if cfg.HookTimeout <= 0 {
		cfg.HookTimeout = HookTimeoutDefault
	}
	if cfg.PostTimeout <= 0 {
		cfg.PostTimeout = PostTimeoutDefault
	}
	if cfg.Queue <= 0 {
		cfg.Queue = QueueDefault
	}
	if cfg.Attempts <= 0 {
		cfg.Attempts = AttemptsDefault
	}
	if cfg.BackoffMin <= 0 {
		cfg.BackoffMin = BackoffMinDefault
	}
	if cfg.BackoffMax < cfg.BackoffMin {
		cfg.BackoffMax = max(BackoffMaxDefault, cfg.BackoffMin)
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Notifier{cfg: cfg, log: cfg.Logger.With("host", cfg.Host), ch: make(chan Event, cfg.Queue), suspended: map[string]time.Time{}}, nil
}

// Observe queues a job-failed event for each failed run and a cap-hit
// event for each run refused or stopped at a cap. It never blocks.
func (n *Notifier) Observe(ev dispatch.Event) {
	if ev.Kind != dispatch.EventFinish {
		return
	}
	kind := ""
	switch {
	case capReasons[ev.Reason]:
		kind = KindCapHit
	case ev.Outcome == jobs.OutcomeFailed:
		kind = KindJobFailed
	default:
		return
	}
	n.Notify(Event{Kind: kind, At: ev.At, Host: ev.Host, JobID: ev.JobID, Attempt: ev.Attempt, Outcome: ev.Outcome, Reason: string(ev.Reason)})
}

// ProviderSuspended queues a provider-suspended event, once per suspension:
// a later call for the same provider before until has passed is dropped.
func (n *Notifier) ProviderSuspended(provider string, until time.Time) {
	n.mu.Lock()
	last, seen := n.suspended[provider]
	fresh := !seen || !n.cfg.Now().Before(last)
	if fresh || until.After(last) {
		n.suspended[provider] = until
	}
	n.mu.Unlock()
	if fresh {
		u := until.UTC()
		n.Notify(Event{Kind: KindProviderSuspended, Host: n.cfg.Host, Provider: provider, Until: &u})
	}
}

// Notify queues ev (its ID, At, Host and Text are filled when empty). A full
// queue drops it, with a log line.
func (n *Notifier) Notify(ev Event) {
	if n.cfg.Hook == "" && n.cfg.URL == "" {
		return
	}
	ev = n.fill(ev)
	select {
	case n.ch <- ev:
	default:
		n.log.Warn("notify_dropped", "event", ev.Kind, "jobId", ev.JobID, "reason", "queue full")
	}
}

func (n *Notifier) fill(ev Event) Event {
	if ev.At.IsZero() {
		ev.At = n.cfg.Now()
	}
	ev.At = ev.At.UTC().Truncate(time.Millisecond)
	if ev.Host == "" {
		ev.Host = n.cfg.Host
	}
	if ev.Text == "" {
		ev.Text = text(ev)
	}
	if ev.ID == "" {
		sum := sha256.Sum256(fmt.Appendf(nil, "%s\x00%s\x00%s\x00%d\x00%s\x00%s\x00%d", ev.Kind, ev.Host, ev.JobID, ev.Attempt, ev.Reason, ev.Provider, ev.At.UnixMilli()))
		ev.ID = hex.EncodeToString(sum[:12])
	}
	return ev
}

// text is the event's one plain line, as Slack's mrkdwn shows it: every
// value in it is written by sinktext.Slack, since a job's id is whatever a
// Valkey writer chose and must not form <!channel>, a mention or a link.
func text(ev Event) string {
	id, reason, host, provider := sinktext.Slack(ev.JobID), sinktext.Slack(ev.Reason), sinktext.Slack(ev.Host), sinktext.Slack(ev.Provider)
	switch ev.Kind {
	case KindJobFailed:
		return fmt.Sprintf("pidispatch: job %s failed (%s, attempt %d) on %s", id, reason, ev.Attempt, host)
	case KindCapHit:
		return fmt.Sprintf("pidispatch: job %s stopped at a cap (%s) on %s", id, reason, host)
	case KindProviderSuspended:
		until := ""
		if ev.Until != nil {
			until = " until " + ev.Until.Format(time.RFC3339)
		}
		return fmt.Sprintf("pidispatch: provider %s rate-limited%s (seen by %s)", provider, until, host)
	case KindFleetPaused:
		return "pidispatch: the fleet was paused by " + host
	case KindFleetResumed:
		return "pidispatch: the fleet was resumed by " + host
	}
	return "pidispatch: " + sinktext.Slack(ev.Kind)
}

// Run delivers queued events until ctx ends, a few at once; a delivery in
// its backoff ends with ctx too.
func (n *Notifier) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	slots := make(chan struct{}, parallel)
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev := <-n.ch:
			select {
			case slots <- struct{}{}:
			case <-ctx.Done():
				return nil
			}
			wg.Go(func() {
				defer func() { <-slots }()
				_ = n.Send(ctx, ev)
			})
		}
	}
}

// Send delivers ev now to the hook (job events only) and the webhook, each
// retried with backoff until it lands, Config.Attempts is spent or ctx ends.
// The CLI sends its fleet-paused and fleet-resumed events this way.
func (n *Notifier) Send(ctx context.Context, ev Event) error {
	ev = n.fill(ev)
	var errs []error
	if n.cfg.Hook != "" && ev.JobID != "" && (ev.Kind == KindJobFailed || ev.Kind == KindCapHit) {
		errs = append(errs, n.retry(ctx, ev, "hook", func(ctx context.Context) (bool, error) { return n.runHook(ctx, ev) }))
	}
	if n.cfg.URL != "" {
		errs = append(errs, n.retry(ctx, ev, "webhook", func(ctx context.Context) (bool, error) { return n.post(ctx, ev) }))
	}
	return errors.Join(errs...)
}

// retry runs try until it succeeds, says not to retry, or the attempts or
// ctx end.
func (n *Notifier) retry(ctx context.Context, ev Event, to string, try func(context.Context) (retry bool, err error)) error {
	wait := n.cfg.BackoffMin
	for i := 1; ; i++ {
		again, err := try(ctx)
		if err == nil {
			n.log.Info("notify_delivered", "to", to, "event", ev.Kind, "jobId", ev.JobID, "tries", i)
			return nil
		}
		if !again || i >= n.cfg.Attempts {
			n.log.Warn("notify_failed", "to", to, "event", ev.Kind, "jobId", ev.JobID, "tries", i, "err", err)
			return err
		}
		n.log.Info("notify_retrying", "to", to, "event", ev.Kind, "jobId", ev.JobID, "tries", i, "in", wait.String(), "err", err)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		wait = min(2*wait, n.cfg.BackoffMax)
	}
}
