package gateway

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// resetHeaders are the providers' reset headers other than retry-after:
// Anthropic's are RFC 3339 times, OpenAI's durations ("1s", "6m0s").
var resetHeaders = []string{
	"anthropic-ratelimit-requests-reset", "anthropic-ratelimit-tokens-reset",
	"anthropic-ratelimit-input-tokens-reset", "anthropic-ratelimit-output-tokens-reset",
	"x-ratelimit-reset-requests", "x-ratelimit-reset-tokens",
}

// resetTime is when a 429/529 answer says to come back: retry-after when
// it is there (seconds or an HTTP date), else the latest reset header.
func resetTime(h http.Header, now time.Time) (time.Time, bool) {
	if v := strings.TrimSpace(h.Get("retry-after")); v != "" {
		if t, ok := parseReset(v, now); ok {
			return t, true
		}
		if t, err := http.ParseTime(v); err == nil {
			return t, true
		}
	}
	var latest time.Time
	for _, name := range resetHeaders {
		if t, ok := parseReset(strings.TrimSpace(h.Get(name)), now); ok && t.After(latest) {
			latest = t
		}
	}
	return latest, !latest.IsZero()
}

// parseReset reads whole or decimal seconds, a Go-style duration or an RFC
// 3339 time.
func parseReset(v string, now time.Time) (time.Time, bool) {
	if v == "" {
		return time.Time{}, false
	}
	if f, err := strconv.ParseFloat(v, 64); err == nil && f >= 0 && f < 1e9 {
		return now.Add(time.Duration(f * float64(time.Second))), true
	}
	if d, err := time.ParseDuration(v); err == nil && d >= 0 {
		return now.Add(d), true
	}
	if t, err := time.Parse(time.RFC3339, v); err == nil {
		return t, true
	}
	return time.Time{}, false
}

// noteRateLimit records a provider's 429/529 reset in the fleet's rate
// limits; the answer itself passes through unchanged.
func (s *Session) noteRateLimit(resp *http.Response, provider string) {
	rl := s.g.cfg.RateLimits
	until, ok := resetTime(resp.Header, s.g.cfg.Now())
	if rl == nil || !ok {
		return
	}
	why := strconv.Itoa(resp.StatusCode) + " rate limited by " + provider
	if resp.StatusCode == 529 {
		why = "529 overloaded: " + provider
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(resp.Request.Context()), 5*time.Second)
	defer cancel()
	if err := rl.Suspend(ctx, provider, until, why); err != nil {
		s.log.Warn("model_rate_limit_not_recorded", "provider", provider, "status", resp.StatusCode, "err", err)
		return
	}
	s.log.Warn("model_rate_limited", "provider", provider, "status", resp.StatusCode, "until", until.UTC().Format(time.RFC3339Nano))
}

// rateGate holds a call while its provider is suspended: it waits for a
// reset within RateLimitWait, else answers 429 with retry-after. A rate
// limit store that cannot be read lets the call through.
func (s *Session) rateGate(w http.ResponseWriter, r *http.Request, c *call) bool {
	rl := s.g.cfg.RateLimits
	if rl == nil {
		return true
	}
	until, err := rl.SuspendedUntil(r.Context(), c.provider)
	if err != nil {
		s.mu.Lock()
		first := !s.rlWarned
		s.rlWarned = true
		s.mu.Unlock()
		if first {
			s.log.Warn("model_rate_limits_unreadable", "provider", c.provider, "err", err)
		}
		return true
	}
	d := until.Sub(s.g.cfg.Now())
	if d <= 0 {
		return true
	}
	if d > s.g.cfg.RateLimitWait {
		s.mu.Lock()
		s.refused++
		s.mu.Unlock()
		s.log.Info("model_call_refused", "provider", c.provider, "model", c.shown, "reason", "rate-limit", "until", until.UTC().Format(time.RFC3339))
		w.Header().Set("retry-after", strconv.FormatInt(int64((d+time.Second-1)/time.Second), 10))
		writeError(w, shapeOf(c.provider), failRateLimited, "pidispatch: provider "+quote(c.provider)+" is rate limited until "+until.UTC().Format(time.RFC3339))
		return false
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-r.Context().Done():
		return false
	case <-s.ctx.Done():
		writeError(w, shapeOf(c.provider), failClosed, "pidispatch: the job's model session is closed")
		return false
	}
}
