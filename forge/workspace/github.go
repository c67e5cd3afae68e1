package workspace

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"github.com/google/go-github/v84/github"

	"github.com/pidispatch/pidispatch/forge/token"
)

// GitHub is the API of GitHub (or a GitHub Enterprise Server) at APIURL.
type GitHub struct {
	// APIURL is the REST root; empty: https://api.github.com/.
	APIURL string
	// HTTPClient; nil: one that never follows a redirect.
	HTTPClient *http.Client
}

var _ API = (*GitHub)(nil)

func (g *GitHub) client(tok token.Token) (*github.Client, error) {
	return token.NewGitHubClient(g.APIURL, g.HTTPClient, tok.Reveal())
}

func splitRepo(repo string) (string, string, error) {
	owner, name, ok := strings.Cut(repo, "/")
	if !ok || owner == "" || name == "" || strings.Contains(name, "/") {
		return "", "", fmt.Errorf("repository %q is not owner/name", repo)
	}
	return owner, name, nil
}

// GitUser is the user name of an installation or personal token over git.
func (g *GitHub) GitUser() string { return "x-access-token" }

// Repository implements API.
func (g *GitHub) Repository(ctx context.Context, tok token.Token, repo string) (Repository, error) {
	owner, name, err := splitRepo(repo)
	if err != nil {
		return Repository{}, err
	}
	c, err := g.client(tok)
	if err != nil {
		return Repository{}, err
	}
	r, resp, err := c.Repositories.Get(ctx, owner, name)
	if err != nil {
		return Repository{}, token.ClassifyHTTP(resp, err)
	}
	return Repository{CloneURL: r.GetCloneURL(), DefaultBranch: r.GetDefaultBranch()}, nil
}

// PullRequest implements API.
func (g *GitHub) PullRequest(ctx context.Context, tok token.Token, repo string, number int) (PullHead, error) {
	owner, name, err := splitRepo(repo)
	if err != nil {
		return PullHead{}, err
	}
	c, err := g.client(tok)
	if err != nil {
		return PullHead{}, err
	}
	pr, resp, err := c.PullRequests.Get(ctx, owner, name, number)
	if err != nil {
		return PullHead{}, token.ClassifyHTTP(resp, err)
	}
	h := PullHead{Ref: fmt.Sprintf("refs/pull/%d/head", number), SHA: pr.GetHead().GetSHA(), Base: pr.GetBase().GetRef()}
	if strings.EqualFold(pr.GetHead().GetRepo().GetFullName(), repo) {
		h.Branch = pr.GetHead().GetRef()
	}
	return h, nil
}

// BranchProtected implements API.
func (g *GitHub) BranchProtected(ctx context.Context, tok token.Token, repo, branch string) (bool, error) {
	owner, name, err := splitRepo(repo)
	if err != nil {
		return false, err
	}
	c, err := g.client(tok)
	if err != nil {
		return false, err
	}
	b, resp, err := c.Repositories.GetBranch(ctx, owner, name, branch, 0)
	if resp != nil && resp.StatusCode == http.StatusNotFound {
		return false, nil
	}
	if err != nil {
		return false, token.ClassifyHTTP(resp, err)
	}
	return b.GetProtected(), nil
}

// FindPullRequest implements API.
func (g *GitHub) FindPullRequest(ctx context.Context, tok token.Token, repo, head string) (string, error) {
	owner, name, err := splitRepo(repo)
	if err != nil {
		return "", err
	}
	c, err := g.client(tok)
	if err != nil {
		return "", err
	}
	prs, resp, err := c.PullRequests.List(ctx, owner, name, &github.PullRequestListOptions{State: "open", Head: owner + ":" + head})
	if err != nil {
		return "", token.ClassifyHTTP(resp, err)
	}
	for _, pr := range prs {
		if pr.GetHead().GetRef() == head {
			return pr.GetHTMLURL(), nil
		}
	}
	return "", nil
}

// OpenPullRequest implements API.
func (g *GitHub) OpenPullRequest(ctx context.Context, tok token.Token, repo string, p NewPullRequest) (string, error) {
	owner, name, err := splitRepo(repo)
	if err != nil {
		return "", err
	}
	c, err := g.client(tok)
	if err != nil {
		return "", err
	}
	pr, resp, err := c.PullRequests.Create(ctx, owner, name, &github.NewPullRequest{
		Title: github.Ptr(p.Title), Body: github.Ptr(p.Body),
		Head: github.Ptr(p.Head), Base: github.Ptr(p.Base), Draft: github.Ptr(p.Draft),
	})
	if err != nil {
		return "", token.ClassifyHTTP(resp, err)
	}
	return pr.GetHTMLURL(), nil
}

// Comment implements API.
func (g *GitHub) Comment(ctx context.Context, tok token.Token, repo string, number int, _ bool, body string) error {
	owner, name, err := splitRepo(repo)
	if err != nil {
		return err
	}
	c, err := g.client(tok)
	if err != nil {
		return err
	}
	_, resp, err := c.Issues.CreateComment(ctx, owner, name, number, &github.IssueComment{Body: github.Ptr(body)})
	if err != nil {
		return token.ClassifyHTTP(resp, err)
	}
	return nil
}
