package fleetstate

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"

	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/internal/bounded"
	"github.com/pidispatch/pidispatch/internal/check"
	"github.com/pidispatch/pidispatch/jobs"
)

// Bounds of a rate-limit suspension.
const (
	// MaxSuspension is the longest a provider stays suspended from one
	// report: a reset further out (a clock gone wrong, a hostile row) is
	// held to it, so no single answer stops a provider's jobs for longer.
	MaxSuspension = 24 * time.Hour
	// MaxSuspensionWhy bounds a suspension's reason, in bytes.
	MaxSuspensionWhy = 256
	// DefaultRateLimitsCallTimeout bounds each Valkey call of a RateLimits.
	DefaultRateLimitsCallTimeout = 2 * time.Second
)

// ErrBadProvider is a provider name that is not lowercase letters, digits
// and dashes, 1 to 64 of them.
var ErrBadProvider = errors.New("provider name must be 1 to 64 lowercase letters, digits and dashes")

// RateLimitsConfig tunes a RateLimits. The zero value is valid.
type RateLimitsConfig struct {
	// CallTimeout bounds every Valkey call. Defaults to 2s.
	CallTimeout time.Duration
	// Logger receives reachability transitions (ratelimits_unreachable,
	// ratelimits_restored), once each. Defaults to discarding.
	Logger *slog.Logger
	// Host is this worker's name, the host attribute of every log line.
	Host string
}

// RateLimits is the fleet-wide record of rate-limited providers on Valkey:
// one key per provider (RateLimitKey) expiring at its reset, and a set of
// the names (RateLimitProvidersKey) for List. Every row is validated again
// when read: a row another process wrote is never trusted.
//
// A RateLimits is safe for concurrent use. It does not own the client.
type RateLimits struct {
	client redis.UniversalClient
	cfg    RateLimitsConfig
	health budgetHealth
	calls  bounded.Calls
}

var _ dispatch.RateLimits = (*RateLimits)(nil)

// NewRateLimits returns a RateLimits over client.
func NewRateLimits(client redis.UniversalClient, cfg RateLimitsConfig) *RateLimits {
	if cfg.CallTimeout <= 0 {
		cfg.CallTimeout = DefaultRateLimitsCallTimeout
	}
	health := storeHealth(cfg.Logger, cfg.Host, "ratelimits")
	return &RateLimits{client: client, cfg: cfg, health: health}
}

// Suspend records that provider is limited until until, on the server's clock:
// a later reset replaces the record, an earlier one never shortens it, and a
// reset already past does nothing. A reset beyond MaxSuspension is held to it.
// why is stripped of control characters and cut to MaxSuspensionWhy bytes.
func (l *RateLimits) Suspend(ctx context.Context, provider string, until time.Time, why string) error {
	if !jobs.ValidProvider(provider) {
		return fmt.Errorf("rate limits: %s: %w", check.Quote(provider), ErrBadProvider)
	}
	keys := []string{RateLimitKey(provider), RateLimitProvidersKey}
	_, err := bounded.Call(ctx, l.cfg.CallTimeout, &l.calls, nil, func(ctx context.Context) (any, error) {
		return suspendScript.Run(ctx, l.client, keys, until.UnixMilli(), cleanWhy(why), provider, MaxSuspension.Milliseconds()).Result()
	})
	l.health.observe(err)
	if err != nil {
		return fmt.Errorf("%w: suspend %s: %w", dispatch.ErrRateLimitsUnavailable, provider, err)
	}
	return nil
}

// SuspendedUntil is provider's reset time, or the zero time when it is not
// suspended (or its row does not read as a suspension).
func (l *RateLimits) SuspendedUntil(ctx context.Context, provider string) (time.Time, error) {
	if !jobs.ValidProvider(provider) {
		return time.Time{}, fmt.Errorf("rate limits: %s: %w", check.Quote(provider), ErrBadProvider)
	}
	v, err := bounded.Call(ctx, l.cfg.CallTimeout, &l.calls, nil, func(ctx context.Context) (string, error) {
		return l.client.Get(ctx, RateLimitKey(provider)).Result()
	})
	if errors.Is(err, redis.Nil) {
		err, v = nil, ""
	}
	l.health.observe(err)
	if err != nil {
		return time.Time{}, fmt.Errorf("%w: read %s: %w", dispatch.ErrRateLimitsUnavailable, provider, err)
	}
	s, ok := parseSuspension(provider, v, time.Now())
	if !ok {
		return time.Time{}, nil
	}
	return s.Until, nil
}

// List is every suspended provider, sorted by name. It prunes the names whose
// suspension ended from RateLimitProvidersKey, and skips rows that do not
// validate.
func (l *RateLimits) List(ctx context.Context) ([]dispatch.Suspension, error) {
	res, err := bounded.Call(ctx, l.cfg.CallTimeout, &l.calls, nil, func(ctx context.Context) (any, error) {
		return listSuspensionsScript.Run(ctx, l.client, []string{RateLimitProvidersKey}, rateLimitPrefix).Result()
	})
	l.health.observe(err)
	if err != nil {
		return nil, fmt.Errorf("%w: list: %w", dispatch.ErrRateLimitsUnavailable, err)
	}
	arr, _ := res.([]any)
	now := time.Now()
	var out []dispatch.Suspension
	for i := 0; i+1 < len(arr); i += 2 {
		name, _ := arr[i].(string)
		v, _ := arr[i+1].(string)
		if s, ok := parseSuspension(name, v, now); ok {
			out = append(out, s)
		}
	}
	slices.SortFunc(out, func(a, b dispatch.Suspension) int { return strings.Compare(a.Provider, b.Provider) })
	return out, nil
}

// Close waits, until ctx ends, for Valkey calls that overran CallTimeout. It
// does not close the client.
func (l *RateLimits) Close(ctx context.Context) error { return l.calls.Wait(ctx) }

// parseSuspension reads a stored "<until ms> <why>" of provider, validating
// all of it: the name, an until after now and at most MaxSuspension ahead
// (held to it), the reason cleaned again.
func parseSuspension(provider, v string, now time.Time) (dispatch.Suspension, bool) {
	if !jobs.ValidProvider(provider) {
		return dispatch.Suspension{}, false
	}
	msText, why, _ := strings.Cut(v, " ")
	ms, err := strconv.ParseInt(msText, 10, 64)
	if err != nil || ms <= now.UnixMilli() {
		return dispatch.Suspension{}, false
	}
	until := time.UnixMilli(ms).UTC()
	if limit := now.Add(MaxSuspension); until.After(limit) {
		until = limit.UTC()
	}
	return dispatch.Suspension{Provider: provider, Until: until, Why: cleanWhy(why)}, true
}

// cleanWhy is a suspension's reason as it is stored and shown: valid UTF-8,
// no control characters, at most MaxSuspensionWhy bytes (cut on a character
// boundary).
func cleanWhy(s string) string {
	s = strings.ToValidUTF8(s, "")
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return -1
		}
		return r
	}, s)
	for len(s) > MaxSuspensionWhy {
		_, size := utf8.DecodeLastRuneInString(s)
		s = s[:len(s)-size]
	}
	return s
}
