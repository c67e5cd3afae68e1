package dispatchtest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/pidispatch/pidispatch/dispatch"
	"github.com/pidispatch/pidispatch/jobs"
)

// The bounds of the Valkey RateLimits (fleetstate/ratelimits.go), held by the
// fake alike.
const (
	maxSuspension    = 24 * time.Hour
	maxSuspensionWhy = 256
)

// RateLimits is an in-memory dispatch.RateLimits with the Valkey store's
// rules: a later reset wins and an earlier one never shortens a suspension;
// a reset already past does nothing; a reset beyond 24 hours is held to 24
// hours; a provider name is 1 to 64 lowercase letters, digits and dashes; a
// reason loses its control characters and is cut to 256 bytes. It starts no
// goroutine: a suspension ends when the clock passes its reset.
type RateLimits struct {
	// Now is the store's clock (the server's, on Valkey). Default time.Now,
	// moved on by Advance.
	Now func() time.Time
	// Err, when set, fails every call, wrapped in
	// dispatch.ErrRateLimitsUnavailable.
	Err error

	mu     sync.Mutex
	offset time.Duration
	rows   map[string]dispatch.Suspension
}

var _ dispatch.RateLimits = (*RateLimits)(nil)

// NewRateLimits returns an empty store.
func NewRateLimits() *RateLimits { return &RateLimits{rows: map[string]dispatch.Suspension{}} }

// errBadProvider is the fake's refusal of a provider name.
var errBadProvider = errors.New("provider name must be 1 to 64 lowercase letters, digits and dashes")

func (l *RateLimits) now() time.Time {
	now := time.Now()
	if l.Now != nil {
		now = l.Now()
	}
	return now.Add(l.offset)
}

// Advance moves the store's clock on by d.
func (l *RateLimits) Advance(d time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.offset += d
}

// SetErr sets Err under the store's lock.
func (l *RateLimits) SetErr(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.Err = err
}

// Suspend records provider's suspension; a later reset wins.
func (l *RateLimits) Suspend(ctx context.Context, provider string, until time.Time, why string) error {
	if !jobs.ValidProvider(provider) {
		return fmt.Errorf("rate limits: %q: %w", provider, errBadProvider)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.Err != nil {
		return fmt.Errorf("%w: suspend %s: %w", dispatch.ErrRateLimitsUnavailable, provider, l.Err)
	}
	now := l.now()
	until = time.UnixMilli(until.UnixMilli()).UTC() // stored in milliseconds
	if limit := time.UnixMilli(now.Add(maxSuspension).UnixMilli()).UTC(); until.After(limit) {
		until = limit
	}
	if !until.After(now) {
		return nil
	}
	if cur, ok := l.live(provider, now); ok && !cur.Until.Before(until) {
		return nil
	}
	if l.rows == nil {
		l.rows = map[string]dispatch.Suspension{}
	}
	l.rows[provider] = dispatch.Suspension{Provider: provider, Until: until, Why: fakeCleanWhy(why)}
	return nil
}

// live is provider's suspension when it has not ended at now.
func (l *RateLimits) live(provider string, now time.Time) (dispatch.Suspension, bool) {
	s, ok := l.rows[provider]
	if !ok || !s.Until.After(now) {
		delete(l.rows, provider)
		return dispatch.Suspension{}, false
	}
	return s, true
}

// SuspendedUntil is provider's reset, or the zero time.
func (l *RateLimits) SuspendedUntil(ctx context.Context, provider string) (time.Time, error) {
	if !jobs.ValidProvider(provider) {
		return time.Time{}, fmt.Errorf("rate limits: %q: %w", provider, errBadProvider)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.Err != nil {
		return time.Time{}, fmt.Errorf("%w: read %s: %w", dispatch.ErrRateLimitsUnavailable, provider, l.Err)
	}
	s, _ := l.live(provider, l.now())
	return s.Until, nil
}

// List is every suspended provider, sorted by name.
func (l *RateLimits) List(ctx context.Context) ([]dispatch.Suspension, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.Err != nil {
		return nil, fmt.Errorf("%w: list: %w", dispatch.ErrRateLimitsUnavailable, l.Err)
	}
	now := l.now()
	var out []dispatch.Suspension
	for p := range l.rows {
		if s, ok := l.live(p, now); ok {
			out = append(out, s)
		}
	}
	slices.SortFunc(out, func(a, b dispatch.Suspension) int { return strings.Compare(a.Provider, b.Provider) })
	return out, nil
}

func fakeCleanWhy(s string) string {
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return -1
		}
		return r
	}, strings.ToValidUTF8(s, ""))
	for len(s) > maxSuspensionWhy {
		_, size := utf8.DecodeLastRuneInString(s)
		s = s[:len(s)-size]
	}
	return s
}
