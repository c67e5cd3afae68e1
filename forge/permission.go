package forge

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
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

// ErrLookup marks a permission lookup that ended without an answer.
var ErrLookup = errors.New("permission lookup failed")

// ErrLookupForbidden marks a lookup the forge refused to our token (403):
// a configuration fault, reported as such rather than retried forever.
var ErrLookupForbidden = errors.New("permission lookup forbidden to the configured token")

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

func lookupErr(status int, err error) error {
	if status == http.StatusForbidden {
		return fmt.Errorf("%w (status 403)", ErrLookupForbidden)
	}
	if status != 0 {
		return fmt.Errorf("%w: status %d", ErrLookup, status)
	}
	return fmt.Errorf("%w: %v", ErrLookup, err)
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
		if resp != nil {
			return false, lookupErr(resp.StatusCode, err)
		}
		return false, lookupErr(0, err)
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
		if resp != nil {
			return false, lookupErr(resp.StatusCode, err)
		}
		return false, lookupErr(0, err)
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
		if resp != nil {
			return false, lookupErr(resp.StatusCode, err)
		}
		return false, lookupErr(0, err)
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
