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
	// succeed.
	ErrUnavailable = errors.New("forge unavailable")
)

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
