package workspace

import (
	"context"
	"fmt"
	"net/http"
	"path"
	"strings"

	gitlab "gitlab.com/gitlab-org/api/client-go/v2"

	"github.com/pidispatch/pidispatch/forge/token"
)

// GitLab is the API of a GitLab instance at URL (its web root). A repository
// is a project's full path (nested groups allowed).
type GitLab struct {
	URL string
	// HTTPClient; nil: one that never follows a redirect.
	HTTPClient *http.Client
}

var _ API = (*GitLab)(nil)

func (g *GitLab) client(tok token.Token) (*gitlab.Client, error) {
	return NewGitLabClient(g.URL, g.HTTPClient, tok)
}

// NewGitLabClient makes a client-go client for the instance at url with tok,
// without its own retries (the caller retries) and never following a redirect.
func NewGitLabClient(url string, hc *http.Client, tok token.Token) (*gitlab.Client, error) {
	if hc == nil {
		hc = token.NoRedirectClient()
	}
	return gitlab.NewClient(tok.Reveal(), gitlab.WithBaseURL(strings.TrimSuffix(url, "/")+"/api/v4"),
		gitlab.WithHTTPClient(hc), gitlab.WithoutRetries())
}

func gitlabErr(resp *gitlab.Response, err error) error {
	if resp == nil || resp.Response == nil {
		return fmt.Errorf("%w: %w", token.ErrUnavailable, err)
	}
	return token.ClassifyStatus(resp.StatusCode, err)
}

// GitUser: GitLab takes an access token as the password of "oauth2".
func (g *GitLab) GitUser() string { return "oauth2" }

// Repository implements API.
func (g *GitLab) Repository(ctx context.Context, tok token.Token, repo string) (Repository, error) {
	c, err := g.client(tok)
	if err != nil {
		return Repository{}, err
	}
	p, resp, err := c.Projects.GetProject(repo, nil, gitlab.WithContext(ctx))
	if err != nil {
		return Repository{}, gitlabErr(resp, err)
	}
	return Repository{CloneURL: p.HTTPURLToRepo, DefaultBranch: p.DefaultBranch}, nil
}

// PullRequest implements API: a merge request.
func (g *GitLab) PullRequest(ctx context.Context, tok token.Token, repo string, number int) (PullHead, error) {
	c, err := g.client(tok)
	if err != nil {
		return PullHead{}, err
	}
	mr, resp, err := c.MergeRequests.GetMergeRequest(repo, int64(number), nil, gitlab.WithContext(ctx))
	if err != nil {
		return PullHead{}, gitlabErr(resp, err)
	}
	h := PullHead{Ref: fmt.Sprintf("refs/merge-requests/%d/head", number), SHA: mr.SHA, Base: mr.TargetBranch}
	if mr.SourceProjectID == mr.ProjectID {
		h.Branch = mr.SourceBranch
	}
	return h, nil
}

// BranchProtected implements API: a protection rule names the branch or a
// wildcard pattern matching it.
func (g *GitLab) BranchProtected(ctx context.Context, tok token.Token, repo, branch string) (bool, error) {
	c, err := g.client(tok)
	if err != nil {
		return false, err
	}
	opt := &gitlab.ListProtectedBranchesOptions{ListOptions: gitlab.ListOptions{PerPage: 100}}
	for page := int64(1); page <= 10; page++ {
		opt.Page = page
		rules, resp, err := c.ProtectedBranches.ListProtectedBranches(repo, opt, gitlab.WithContext(ctx))
		if err != nil {
			return false, gitlabErr(resp, err)
		}
		for _, r := range rules {
			if ok, _ := path.Match(r.Name, branch); ok || r.Name == branch {
				return true, nil
			}
		}
		if len(rules) < 100 {
			break
		}
	}
	return false, nil
}

// FindPullRequest implements API.
func (g *GitLab) FindPullRequest(ctx context.Context, tok token.Token, repo, head string) (string, error) {
	c, err := g.client(tok)
	if err != nil {
		return "", err
	}
	mrs, resp, err := c.MergeRequests.ListProjectMergeRequests(repo, &gitlab.ListProjectMergeRequestsOptions{
		State: gitlab.Ptr("opened"), SourceBranch: gitlab.Ptr(head),
	}, gitlab.WithContext(ctx))
	if err != nil {
		return "", gitlabErr(resp, err)
	}
	for _, mr := range mrs {
		if mr.SourceBranch == head && mr.SourceProjectID == mr.ProjectID {
			return mr.WebURL, nil
		}
	}
	return "", nil
}

// OpenPullRequest implements API: a merge request, a draft when its title
// starts "Draft: ".
func (g *GitLab) OpenPullRequest(ctx context.Context, tok token.Token, repo string, p NewPullRequest) (string, error) {
	c, err := g.client(tok)
	if err != nil {
		return "", err
	}
	title := p.Title
	if p.Draft {
		title = "Draft: " + title
	}
	mr, resp, err := c.MergeRequests.CreateMergeRequest(repo, &gitlab.CreateMergeRequestOptions{
		Title: gitlab.Ptr(title), Description: gitlab.Ptr(p.Body),
		SourceBranch: gitlab.Ptr(p.Head), TargetBranch: gitlab.Ptr(p.Base),
	}, gitlab.WithContext(ctx))
	if err != nil {
		return "", gitlabErr(resp, err)
	}
	return mr.WebURL, nil
}

// Comment implements API: a note on the issue or the merge request.
func (g *GitLab) Comment(ctx context.Context, tok token.Token, repo string, number int, pullRequest bool, body string) error {
	c, err := g.client(tok)
	if err != nil {
		return err
	}
	var resp *gitlab.Response
	if pullRequest {
		_, resp, err = c.Notes.CreateMergeRequestNote(repo, int64(number), &gitlab.CreateMergeRequestNoteOptions{Body: gitlab.Ptr(body)}, gitlab.WithContext(ctx))
	} else {
		_, resp, err = c.Notes.CreateIssueNote(repo, int64(number), &gitlab.CreateIssueNoteOptions{Body: gitlab.Ptr(body)}, gitlab.WithContext(ctx))
	}
	if err != nil {
		return gitlabErr(resp, err)
	}
	return nil
}
