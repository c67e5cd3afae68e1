package workspace

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"code.gitea.io/sdk/gitea"

	"github.com/pidispatch/pidispatch/forge/token"
)

// Gitea is the API of a Forgejo or Gitea instance at URL (its web root).
type Gitea struct {
	URL string
	// HTTPClient; nil: one that never follows a redirect.
	HTTPClient *http.Client
}

var _ API = (*Gitea)(nil)

func (g *Gitea) client(ctx context.Context, tok token.Token) (*gitea.Client, error) {
	hc := g.HTTPClient
	if hc == nil {
		hc = token.NoRedirectClient()
	}
	// The version is not asked for: one call less per job, and no answer to trust.
	return gitea.NewClient(strings.TrimSuffix(g.URL, "/"), gitea.SetHTTPClient(hc), gitea.SetToken(tok.Reveal()),
		gitea.SetContext(ctx), gitea.SetGiteaVersion(""))
}

func giteaErr(resp *gitea.Response, err error) error {
	if resp == nil || resp.Response == nil {
		return fmt.Errorf("%w: %w", token.ErrUnavailable, err)
	}
	return token.ClassifyStatus(resp.StatusCode, err)
}

// GitUser: Gitea takes a token as the password of any user name.
func (g *Gitea) GitUser() string { return "oauth2" }

// Repository implements API.
func (g *Gitea) Repository(ctx context.Context, tok token.Token, repo string) (Repository, error) {
	owner, name, err := splitRepo(repo)
	if err != nil {
		return Repository{}, err
	}
	c, err := g.client(ctx, tok)
	if err != nil {
		return Repository{}, err
	}
	r, resp, err := c.GetRepo(owner, name)
	if err != nil {
		return Repository{}, giteaErr(resp, err)
	}
	return Repository{CloneURL: r.CloneURL, DefaultBranch: r.DefaultBranch}, nil
}

// PullRequest implements API.
func (g *Gitea) PullRequest(ctx context.Context, tok token.Token, repo string, number int) (PullHead, error) {
	owner, name, err := splitRepo(repo)
	if err != nil {
		return PullHead{}, err
	}
	c, err := g.client(ctx, tok)
	if err != nil {
		return PullHead{}, err
	}
	pr, resp, err := c.GetPullRequest(owner, name, int64(number))
	if err != nil {
		return PullHead{}, giteaErr(resp, err)
	}
	h := PullHead{Ref: fmt.Sprintf("refs/pull/%d/head", number)}
	if pr.Head != nil {
		h.SHA = pr.Head.Sha
		if pr.Head.Repository != nil && strings.EqualFold(pr.Head.Repository.FullName, repo) {
			h.Branch = pr.Head.Ref
		}
	}
	if pr.Base != nil {
		h.Base = pr.Base.Ref
	}
	return h, nil
}

// BranchProtected implements API.
func (g *Gitea) BranchProtected(ctx context.Context, tok token.Token, repo, branch string) (bool, error) {
	owner, name, err := splitRepo(repo)
	if err != nil {
		return false, err
	}
	c, err := g.client(ctx, tok)
	if err != nil {
		return false, err
	}
	b, resp, err := c.GetRepoBranch(owner, name, branch)
	if resp != nil && resp.StatusCode == http.StatusNotFound {
		return false, nil
	}
	if err != nil {
		return false, giteaErr(resp, err)
	}
	return b.Protected, nil
}

// FindPullRequest implements API.
func (g *Gitea) FindPullRequest(ctx context.Context, tok token.Token, repo, head string) (string, error) {
	owner, name, err := splitRepo(repo)
	if err != nil {
		return "", err
	}
	c, err := g.client(ctx, tok)
	if err != nil {
		return "", err
	}
	for page := 1; page <= 10; page++ {
		prs, resp, err := c.ListRepoPullRequests(owner, name, gitea.ListPullRequestsOptions{
			ListOptions: gitea.ListOptions{Page: page, PageSize: 50}, State: gitea.StateOpen,
		})
		if err != nil {
			return "", giteaErr(resp, err)
		}
		for _, pr := range prs {
			if pr.Head != nil && pr.Head.Ref == head && (pr.Head.Repository == nil || strings.EqualFold(pr.Head.Repository.FullName, repo)) {
				return pr.HTMLURL, nil
			}
		}
		if len(prs) < 50 {
			break
		}
	}
	return "", nil
}

// OpenPullRequest implements API. A draft is a title starting "WIP: ",
// Gitea's and Forgejo's draft marker.
func (g *Gitea) OpenPullRequest(ctx context.Context, tok token.Token, repo string, p NewPullRequest) (string, error) {
	owner, name, err := splitRepo(repo)
	if err != nil {
		return "", err
	}
	c, err := g.client(ctx, tok)
	if err != nil {
		return "", err
	}
	title := p.Title
	if p.Draft {
		title = "WIP: " + title
	}
	pr, resp, err := c.CreatePullRequest(owner, name, gitea.CreatePullRequestOption{Head: p.Head, Base: p.Base, Title: title, Body: p.Body})
	if err != nil {
		return "", giteaErr(resp, err)
	}
	return pr.HTMLURL, nil
}

// Comment implements API.
func (g *Gitea) Comment(ctx context.Context, tok token.Token, repo string, number int, _ bool, body string) error {
	owner, name, err := splitRepo(repo)
	if err != nil {
		return err
	}
	c, err := g.client(ctx, tok)
	if err != nil {
		return err
	}
	_, resp, err := c.CreateIssueComment(owner, name, int64(number), gitea.CreateIssueCommentOption{Body: body})
	if err != nil {
		return giteaErr(resp, err)
	}
	return nil
}
