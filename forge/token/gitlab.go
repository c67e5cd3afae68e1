package token

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	gitlab "gitlab.com/gitlab-org/api/client-go/v2"
)

// GitLabProject mints a project access token per job: Developer role, scopes
// api and write_repository, on the job's one project, expiring two days later
// (GitLab's expiry is a date). Parent is the host's token allowed to create
// them (a Maintainer's, or a group token).
type GitLabProject struct {
	// URL is the instance's web root, e.g. https://gitlab.example.
	URL    string
	Parent Token
	// HTTPClient; nil: one that never follows a redirect.
	HTTPClient *http.Client
	// Now is the clock the expiry date is counted from; nil: time.Now.
	Now func() time.Time

	mu  sync.Mutex
	ids map[string]int64 // minted token -> its id, until revoked
}

// Mint creates the project token for repo (the project's full path).
func (g *GitLabProject) Mint(ctx context.Context, repo string) (Token, error) {
	c, err := g.client()
	if err != nil {
		return Token{}, err
	}
	now := time.Now
	if g.Now != nil {
		now = g.Now
	}
	day := now().UTC().AddDate(0, 0, 2).Truncate(24 * time.Hour) // at least a day of use
	expires := gitlab.ISOTime(day)
	pat, resp, err := c.ProjectAccessTokens.CreateProjectAccessToken(repo, &gitlab.CreateProjectAccessTokenOptions{
		Name:        gitlab.Ptr("pidispatch-job"),
		Scopes:      &[]string{"api", "write_repository"},
		AccessLevel: gitlab.Ptr(gitlab.DeveloperPermissions),
		ExpiresAt:   &expires,
	}, gitlab.WithContext(ctx))
	if err != nil {
		if resp == nil || resp.Response == nil {
			return Token{}, fmt.Errorf("gitlab project token: %w: %w", ErrUnavailable, err)
		}
		return Token{}, fmt.Errorf("gitlab project token: %w", classifyStatus(resp.StatusCode, false, err))
	}
	g.mu.Lock()
	if g.ids == nil {
		g.ids = map[string]int64{}
	}
	g.ids[pat.Token] = pat.ID
	g.mu.Unlock()
	return New(pat.Token, day), nil
}

// Revoke revokes a project token this minter made.
func (g *GitLabProject) Revoke(ctx context.Context, repo string, t Token) error {
	g.mu.Lock()
	id, ok := g.ids[t.Reveal()]
	delete(g.ids, t.Reveal())
	g.mu.Unlock()
	if !ok {
		return nil
	}
	c, err := g.client()
	if err != nil {
		return err
	}
	resp, err := c.ProjectAccessTokens.RevokeProjectAccessToken(repo, id, gitlab.WithContext(ctx))
	if err != nil {
		if resp == nil || resp.Response == nil {
			return fmt.Errorf("gitlab project token revoke: %w: %w", ErrUnavailable, err)
		}
		return fmt.Errorf("gitlab project token revoke: %w", classifyStatus(resp.StatusCode, false, err))
	}
	return nil
}

func (g *GitLabProject) client() (*gitlab.Client, error) {
	hc := g.HTTPClient
	if hc == nil {
		hc = NoRedirectClient()
	}
	return gitlab.NewClient(g.Parent.Reveal(), gitlab.WithBaseURL(strings.TrimSuffix(g.URL, "/")+"/api/v4"),
		gitlab.WithHTTPClient(hc), gitlab.WithoutRetries())
}
