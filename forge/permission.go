package forge

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"code.gitea.io/sdk/gitea"
	"github.com/google/go-github/v84/github"
	gitlab "gitlab.com/gitlab-org/api/client-go/v2"
)

// Tokens hands out the credential an API call about repo is made with.
type Tokens interface {
	Token(ctx context.Context, repo string) (string, error)
}

// StaticToken is one standing token for every repository: a GitHub personal
// access token, a GitLab project or group token, a Forgejo token.
type StaticToken string

// Token returns the token; an empty one is an error, never an anonymous call.
func (s StaticToken) Token(context.Context, string) (string, error) {
	if s == "" {
		return "", errors.New("forge: no token configured")
	}
	return string(s), nil
}

// Permissions says whether an actor holds a permission on a repository, asked
// of the forge. A determinate "no" is (false, nil); an answer the forge could
// not give (network, 5xx, a token it refused) is an error, and the event is
// then neither enqueued nor dropped for good (the forge redelivers).
type Permissions interface {
	Allowed(ctx context.Context, ev Event, need Need) (bool, error)
}

// ErrLookup marks a permission lookup that ended without an answer: a
// network failure, a 5xx, a rate limit. The event is decided later, never
// refused for it.
var ErrLookup = errors.New("permission lookup failed")

// ErrRateLimited marks a lookup the forge turned away for its rate limit: a
// 429, or GitHub's 403 with x-ratelimit-remaining: 0, a Retry-After or its
// secondary-limit documentation. It is also an ErrLookup (ask again later),
// never an ErrLookupForbidden.
var ErrRateLimited = errors.New("permission lookup rate-limited")

// ErrLookupForbidden marks a lookup the forge refused to our token (a 403
// that is no rate limit): a configuration fault, reported as such rather than
// retried forever.
var ErrLookupForbidden = errors.New("permission lookup forbidden to the configured token")

// MaxRetryWait bounds how far ahead a forge's Retry-After or rate-limit
// reset is believed: a header cannot park an event for longer.
const MaxRetryWait = time.Hour

// LookupError is a permission lookup that ended without an answer. It
// unwraps to ErrLookup (and ErrRateLimited) or to ErrLookupForbidden, and
// says when the forge asked to be asked again.
type LookupError struct {
	// Status is the forge's HTTP status; 0 when it did not answer.
	Status int
	// RateLimited: the forge said the token is over its rate limit.
	RateLimited bool
	// RetryAfter is the forge's Retry-After (0: none).
	RetryAfter time.Duration
	// Reset is when the forge's rate-limit window resets, from
	// x-ratelimit-reset or RateLimit-Reset (zero: not said).
	Reset time.Time
	err   error
}

func (e *LookupError) Error() string {
	var b strings.Builder
	switch {
	case e.Status == http.StatusForbidden && !e.RateLimited:
		b.WriteString(ErrLookupForbidden.Error())
	case e.RateLimited:
		b.WriteString(ErrRateLimited.Error())
	default:
		b.WriteString(ErrLookup.Error())
	}
	if e.Status != 0 {
		fmt.Fprintf(&b, " (status %d)", e.Status)
	}
	if e.RetryAfter > 0 {
		fmt.Fprintf(&b, ", retry after %s", e.RetryAfter)
	}
	if !e.Reset.IsZero() {
		fmt.Fprintf(&b, ", resets at %s", e.Reset.UTC().Format(time.RFC3339))
	}
	if e.err != nil && e.Status == 0 {
		fmt.Fprintf(&b, ": %v", e.err)
	}
	return b.String()
}

// Unwrap gives the sentinels errors.Is matches, and the cause.
func (e *LookupError) Unwrap() []error {
	var errs []error
	switch {
	case e.RateLimited:
		errs = []error{ErrRateLimited, ErrLookup}
	case e.Status == http.StatusForbidden:
		errs = []error{ErrLookupForbidden}
	default:
		errs = []error{ErrLookup}
	}
	if e.err != nil {
		errs = append(errs, e.err)
	}
	return errs
}

// RetryAt is when the forge asked, through err, to be asked again: now plus
// its Retry-After, or its rate limit's reset, whichever is later, at most
// MaxRetryWait ahead. ok is false when err says nothing of when.
func RetryAt(err error, now time.Time) (at time.Time, ok bool) {
	var le *LookupError
	if !errors.As(err, &le) {
		return time.Time{}, false
	}
	if le.RetryAfter > 0 {
		at, ok = now.Add(le.RetryAfter), true
	}
	if !le.Reset.IsZero() && le.Reset.After(at) {
		at, ok = le.Reset, true
	}
	if !ok {
		return time.Time{}, false
	}
	if at.Before(now) {
		at = now
	}
	if lim := now.Add(MaxRetryWait); at.After(lim) {
		at = lim
	}
	return at, true
}

// httpClient never follows a redirect, so a token is sent to the configured
// host only, and bounds every call.
func httpClient(c *http.Client) *http.Client {
	if c != nil {
		return c
	}
	return &http.Client{
		Timeout: 10 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return errors.New("forge: redirect refused")
		},
	}
}

// lookupErr classifies a lookup that got no answer. resp is the forge's
// reply (nil when none came): a 429, or a 403 that carries a rate limit's
// headers (GitHub's x-ratelimit-remaining: 0, a Retry-After, a secondary
// limit), is a rate limit to wait out; another 403 is ErrLookupForbidden;
// the rest (5xx, network) is ErrLookup.
func lookupErr(resp *http.Response, err error) error {
	e := &LookupError{err: err}
	var abuse *github.AbuseRateLimitError
	isAbuse := errors.As(err, &abuse)
	if resp == nil {
		return e
	}
	e.Status = resp.StatusCode
	h := resp.Header
	switch {
	case e.Status == http.StatusTooManyRequests, isAbuse:
		e.RateLimited = true
	case e.Status == http.StatusForbidden:
		e.RateLimited = h.Get("X-Ratelimit-Remaining") == "0" || h.Get("Retry-After") != ""
	}
	if !e.RateLimited {
		return e
	}
	e.RetryAfter = retryAfter(h.Get("Retry-After"))
	if e.RetryAfter == 0 && isAbuse {
		// GitHub's secondary limit: its Retry-After, else at least a minute,
		// as GitHub asks.
		e.RetryAfter = time.Minute
		if abuse.RetryAfter != nil && *abuse.RetryAfter > 0 {
			e.RetryAfter = min(*abuse.RetryAfter, MaxRetryWait)
		}
	}
	for _, name := range []string{"X-Ratelimit-Reset", "RateLimit-Reset"} {
		if v := h.Get(name); v != "" {
			if sec, perr := strconv.ParseInt(strings.TrimSpace(v), 10, 64); perr == nil && sec > 0 && sec < 1<<40 {
				e.Reset = time.Unix(sec, 0)
				break
			}
		}
	}
	return e
}

// httpResponse is the reply inside a forge client's response, nil when none
// came. Each client embeds *http.Response in its own type.
func httpResponse[R interface {
	*github.Response | *gitlab.Response | *gitea.Response
}](r R) *http.Response {
	switch v := any(r).(type) {
	case *github.Response:
		if v != nil {
			return v.Response
		}
	case *gitlab.Response:
		if v != nil {
			return v.Response
		}
	case *gitea.Response:
		if v != nil {
			return v.Response
		}
	}
	return nil
}

// retryAfter reads a Retry-After header: whole seconds or an HTTP date; 0
// when absent, unreadable or past.
func retryAfter(v string) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if sec, err := strconv.ParseInt(v, 10, 64); err == nil {
		return time.Duration(min(max(sec, 0), int64(MaxRetryWait/time.Second))) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		return min(max(time.Until(t), 0), MaxRetryWait)
	}
	return 0
}

// GitHubPermissions asks GitHub's collaborator permission endpoint.
type GitHubPermissions struct {
	// BaseURL is the API root (GITHUB_API_URL); default https://api.github.com/.
	BaseURL string
	Tokens  Tokens
	Client  *http.Client
}

// Allowed: write is admin, maintain or write; triage also accepts triage.
func (g GitHubPermissions) Allowed(ctx context.Context, ev Event, need Need) (bool, error) {
	owner, name, ok := strings.Cut(ev.Repo, "/")
	if !ok || ev.SenderLogin == "" {
		return false, nil
	}
	tok, err := g.Tokens.Token(ctx, ev.Repo)
	if err != nil {
		return false, fmt.Errorf("%w: token: %v", ErrLookup, err)
	}
	c, err := GitHubClient(g.BaseURL, tok, g.Client)
	if err != nil {
		return false, fmt.Errorf("%w: %v", ErrLookup, err)
	}
	lvl, resp, err := c.Repositories.GetPermissionLevel(ctx, owner, name, ev.SenderLogin)
	if err != nil {
		if resp != nil && resp.StatusCode == http.StatusNotFound {
			return false, nil
		}
		return false, lookupErr(httpResponse(resp), err)
	}
	switch lvl.GetPermission() {
	case "admin", "write":
		return true, nil
	}
	switch lvl.GetRoleName() {
	case "maintain":
		return true, nil
	case "triage":
		return need == NeedTriage, nil
	}
	return false, nil
}

// DefaultGitHubAPI is the API root of github.com.
const DefaultGitHubAPI = "https://api.github.com"

// GitHubClient returns a go-github client for the API root base (GITHUB_API_URL,
// taken as it is: a GitHub Enterprise Server root ends in /api/v3) that
// authenticates with tok and never follows a redirect. hc nil: a default client.
func GitHubClient(base, tok string, hc *http.Client) (*github.Client, error) {
	c := github.NewClient(httpClient(hc)).WithAuthToken(tok)
	if base == "" {
		base = DefaultGitHubAPI
	}
	u, err := url.Parse(strings.TrimSuffix(base, "/") + "/")
	if err != nil {
		return nil, err
	}
	c.BaseURL = u
	return c, nil
}

// GitLabPermissions asks GitLab for the actor's membership of the project,
// inherited membership included.
type GitLabPermissions struct {
	// BaseURL is GITLAB_URL (https://gitlab.com).
	BaseURL string
	Tokens  Tokens
	Client  *http.Client
}

// Allowed: write is Developer (30) or more; triage is Reporter (20) or more.
func (g GitLabPermissions) Allowed(ctx context.Context, ev Event, need Need) (bool, error) {
	if ev.ProjectID <= 0 || ev.SenderID <= 0 {
		return false, nil
	}
	tok, err := g.Tokens.Token(ctx, ev.Repo)
	if err != nil {
		return false, fmt.Errorf("%w: token: %v", ErrLookup, err)
	}
	c, err := gitlab.NewClient(tok, gitlab.WithBaseURL(strings.TrimSuffix(g.BaseURL, "/")+"/api/v4"),
		gitlab.WithHTTPClient(httpClient(g.Client)), gitlab.WithoutRetries())
	if err != nil {
		return false, fmt.Errorf("%w: %v", ErrLookup, err)
	}
	m, resp, err := c.ProjectMembers.GetInheritedProjectMember(ev.ProjectID, ev.SenderID, gitlab.WithContext(ctx))
	if err != nil {
		if resp != nil && resp.StatusCode == http.StatusNotFound {
			return false, nil
		}
		return false, lookupErr(httpResponse(resp), err)
	}
	min := gitlab.DeveloperPermissions
	if need == NeedTriage {
		min = gitlab.ReporterPermissions
	}
	return m.AccessLevel >= min, nil
}

// ForgejoPermissions asks Forgejo (or Gitea) for the actor's collaborator
// permission.
type ForgejoPermissions struct {
	// BaseURL is FORGEJO_URL.
	BaseURL string
	Tokens  Tokens
	Client  *http.Client
}

// Allowed: write, admin or owner. Forgejo has no triage role; labelling
// needs write there.
func (f ForgejoPermissions) Allowed(ctx context.Context, ev Event, _ Need) (bool, error) {
	owner, name, ok := strings.Cut(ev.Repo, "/")
	if !ok || ev.SenderLogin == "" {
		return false, nil
	}
	tok, err := f.Tokens.Token(ctx, ev.Repo)
	if err != nil {
		return false, fmt.Errorf("%w: token: %v", ErrLookup, err)
	}
	c, err := gitea.NewClient(f.BaseURL, gitea.SetToken(tok), gitea.SetHTTPClient(httpClient(f.Client)),
		gitea.SetContext(ctx), gitea.SetGiteaVersion(""))
	if err != nil {
		return false, fmt.Errorf("%w: %v", ErrLookup, err)
	}
	p, resp, err := c.CollaboratorPermission(owner, name, ev.SenderLogin)
	if err != nil {
		if resp != nil && resp.StatusCode == http.StatusNotFound {
			return false, nil
		}
		return false, lookupErr(httpResponse(resp), err)
	}
	switch p.Permission {
	case gitea.AccessModeWrite, gitea.AccessModeAdmin, gitea.AccessModeOwner:
		return true, nil
	}
	return false, nil
}

// CachedPermissions remembers determinate answers of Inner for TTL, per
// forge, repository, actor and need, so a burst of events by one person costs
// one lookup. Failures are never cached.
type CachedPermissions struct {
	Inner Permissions
	TTL   time.Duration
	// Now is the clock. Default time.Now.
	Now func() time.Time

	mu      sync.Mutex
	answers map[permKey]permAnswer
}

type permKey struct {
	forge  string
	repo   string
	sender int64
	login  string
	need   Need
}

type permAnswer struct {
	ok  bool
	exp time.Time
}

// Allowed implements Permissions.
func (c *CachedPermissions) Allowed(ctx context.Context, ev Event, need Need) (bool, error) {
	now := time.Now
	if c.Now != nil {
		now = c.Now
	}
	k := permKey{string(ev.Forge), ev.Repo, ev.SenderID, ev.SenderLogin, need}
	c.mu.Lock()
	if a, hit := c.answers[k]; hit && now().Before(a.exp) {
		c.mu.Unlock()
		return a.ok, nil
	}
	c.mu.Unlock()
	ok, err := c.Inner.Allowed(ctx, ev, need)
	if err != nil {
		return false, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.answers == nil {
		c.answers = map[permKey]permAnswer{}
	}
	if len(c.answers) > 10000 {
		clear(c.answers) // bounded: a flood of distinct actors cannot grow it
	}
	c.answers[k] = permAnswer{ok, now().Add(c.TTL)}
	return ok, nil
}
