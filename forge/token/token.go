// Package token mints the short-lived forge credentials a host uses for one
// forge job: a GitHub App installation token restricted to the job's one
// repository and the least permissions publishing needs, or a standing token
// (a personal, GitLab project or Forgejo/Gitea token) where the forge has no
// per-job mint. A Token never prints: its String, Format, GoString, JSON and
// slog forms are all "[redacted]", so it cannot leak into a log line, a record
// or an error by accident; Reveal is the one way to its value.
package token

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Redacted is what a Token prints as.
const Redacted = "[redacted]"

// Token is a forge credential and the time it expires (zero: it does not).
type Token struct {
	value   string
	expires time.Time
}

// New makes a Token of value that expires at expires (zero: never).
func New(value string, expires time.Time) Token { return Token{value: value, expires: expires} }

// Reveal returns the credential. Only the code that hands it to the forge
// (an HTTP header, git's environment) calls it.
func (t Token) Reveal() string { return t.value }

// Expires is when the token stops working (zero: it does not expire).
func (t Token) Expires() time.Time { return t.expires }

// IsZero reports whether the token is empty.
func (t Token) IsZero() bool { return t.value == "" }

// Valid reports whether the token is set and still usable at now with margin
// to spare.
func (t Token) Valid(now time.Time, margin time.Duration) bool {
	return t.value != "" && (t.expires.IsZero() || now.Add(margin).Before(t.expires))
}

// String redacts.
func (t Token) String() string { return Redacted }

// GoString redacts (%#v).
func (t Token) GoString() string { return Redacted }

// Format redacts every verb.
func (t Token) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(Redacted)) }

// LogValue redacts in log/slog.
func (t Token) LogValue() slog.Value { return slog.StringValue(Redacted) }

// MarshalJSON redacts.
func (t Token) MarshalJSON() ([]byte, error) { return []byte(`"` + Redacted + `"`), nil }

// MarshalText redacts.
func (t Token) MarshalText() ([]byte, error) { return []byte(Redacted), nil }

// Minter mints a token for one repository ("owner/name", or a GitLab
// project path) before a job and again when the last one expired.
type Minter interface {
	Mint(ctx context.Context, repo string) (Token, error)
}

// Revoker is a Minter whose tokens can be revoked before they expire: the
// host revokes a job's tokens once it has published.
type Revoker interface {
	Revoke(ctx context.Context, repo string, t Token) error
}

// Errors a Minter returns, wrapped.
var (
	// ErrRefused: the forge refused the host's own credential (401, 403):
	// a configuration fault, not worth retrying.
	ErrRefused = errors.New("forge refused the host's credential")
	// ErrNoRepository: the credential cannot reach the repository (404,
	// or the installation does not include it).
	ErrNoRepository = errors.New("repository not reachable with the host's credential")
	// ErrUnavailable: the forge failed (5xx, 429, network); a later try may
	// succeed. RetryAfter says when the forge asked to be tried again.
	ErrUnavailable = errors.New("forge unavailable")
	// ErrRejected: the forge answered the request itself was wrong (another
	// 4xx, such as 400, 409 or 410): the same request will not succeed later.
	ErrRejected = errors.New("forge rejected the request")
)

// UnavailableError is ErrUnavailable with the wait the forge asked for
// (Retry-After, or a rate limit's reset).
type UnavailableError struct {
	RetryAfter time.Duration
	Err        error
}

func (e *UnavailableError) Error() string {
	return fmt.Sprintf("%v: %v (retry after %s)", ErrUnavailable, e.Err, e.RetryAfter)
}

func (e *UnavailableError) Unwrap() []error { return []error{ErrUnavailable, e.Err} }

// RetryAfter answers the wait the forge asked for with err, if it did.
func RetryAfter(err error) (time.Duration, bool) {
	var ue *UnavailableError
	if errors.As(err, &ue) && ue.RetryAfter > 0 {
		return ue.RetryAfter, true
	}
	return 0, false
}

// maxRetryAfter bounds a wait a forge asks for: a larger or unreadable one
// is not honoured as given.
const maxRetryAfter = time.Hour

// ParseRetryAfter reads h's Retry-After (seconds or an HTTP date, relative
// to now), else a rate limit's reset (X-RateLimit-Reset, RateLimit-Reset:
// Unix seconds), bounded by an hour; 0 when none is given.
func ParseRetryAfter(h http.Header, now time.Time) time.Duration {
	var d time.Duration
	if v := strings.TrimSpace(h.Get("Retry-After")); v != "" {
		if secs, err := strconv.ParseInt(v, 10, 64); err == nil && secs >= 0 {
			d = time.Duration(min(secs, int64(maxRetryAfter/time.Second))) * time.Second
		} else if at, err := http.ParseTime(v); err == nil {
			d = at.Sub(now)
		}
	} else {
		for _, name := range []string{"X-RateLimit-Reset", "RateLimit-Reset"} {
			if v := strings.TrimSpace(h.Get(name)); v != "" {
				if unix, err := strconv.ParseInt(v, 10, 64); err == nil && unix > now.Unix() {
					d = time.Unix(unix, 0).Sub(now)
				}
				break
			}
		}
	}
	return min(max(d, 0), maxRetryAfter)
}

// ClassifyResponse classifies a forge's answer to a request that failed
// with err (resp nil: no answer, unavailable).
func ClassifyResponse(resp *http.Response, err error) error {
	if resp == nil {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	rateLimited := resp.Header.Get("X-RateLimit-Remaining") == "0"
	out := classifyStatus(resp.StatusCode, rateLimited, err)
	if errors.Is(out, ErrUnavailable) {
		if d := ParseRetryAfter(resp.Header, time.Now()); d > 0 {
			return &UnavailableError{RetryAfter: d, Err: err}
		}
	}
	return out
}

// Static is a standing token (a personal access token, a GitLab project
// token, a Forgejo/Gitea token) handed out for every repository.
type Static struct{ Token Token }

// Mint returns the standing token.
func (s Static) Mint(context.Context, string) (Token, error) {
	if s.Token.IsZero() {
		return Token{}, fmt.Errorf("static token: %w", ErrRefused)
	}
	return s.Token, nil
}
