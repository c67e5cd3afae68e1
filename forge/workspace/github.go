package workspace

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/google/go-github/v84/github"

	"github.com/pidispatch/pidispatch/forge/token"
	"github.com/pidispatch/pidispatch/jobs"
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

// ForgeURL is where GitHub serves git for the API at APIURL: github.com for
// api.github.com (<tenant>.ghe.com for api.<tenant>.ghe.com), a GitHub
// Enterprise Server's host for its <host>/api/v3, and for any other API URL
// (a proxy, a test forge) that URL's own scheme and host, never a host the
// operator did not name.
func (g *GitHub) ForgeURL() string {
	api := g.APIURL
	if api == "" {
		api = "https://api.github.com/"
	}
	u, err := url.Parse(api)
	if err != nil || u.Host == "" {
		return api // refused by CheckCloneURL as not a URL
	}
	host := u.Host
	if strings.TrimSuffix(u.Path, "/") == "" {
		host, _ = strings.CutPrefix(host, "api.")
	}
	return u.Scheme + "://" + host
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
	return Repository{ID: r.GetID(), CloneURL: r.GetCloneURL(), DefaultBranch: r.GetDefaultBranch(), WebURL: r.GetHTMLURL()}, nil
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
	h := PullHead{Ref: fmt.Sprintf("refs/pull/%d/head", number), SHA: pr.GetHead().GetSHA(), Base: pr.GetBase().GetRef(),
		Head: pr.GetHead().GetRef(), Author: ghPerson(pr.GetUser()), AuthorBot: pr.GetUser().GetType() == "Bot", Body: pr.GetBody()}
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
func (g *GitHub) Comment(ctx context.Context, tok token.Token, repo string, number int, _ bool, body string) (int64, error) {
	owner, name, c, err := g.open(tok, repo)
	if err != nil {
		return 0, err
	}
	cm, resp, err := c.Issues.CreateComment(ctx, owner, name, number, &github.IssueComment{Body: github.Ptr(body)})
	if err != nil {
		return 0, token.ClassifyHTTP(resp, err)
	}
	return cm.GetID(), nil
}

// EditComment implements API.
func (g *GitHub) EditComment(ctx context.Context, tok token.Token, repo string, _ int, _ bool, id int64, body string) error {
	owner, name, c, err := g.open(tok, repo)
	if err != nil {
		return err
	}
	_, resp, err := c.Issues.EditComment(ctx, owner, name, id, &github.IssueComment{Body: github.Ptr(body)})
	if err != nil {
		return token.ClassifyHTTP(resp, err)
	}
	return nil
}

// open splits repo and makes the client for tok: what every read needs.
func (g *GitHub) open(tok token.Token, repo string) (owner, name string, c *github.Client, err error) {
	if owner, name, err = splitRepo(repo); err != nil {
		return "", "", nil, err
	}
	c, err = g.client(tok)
	return owner, name, c, err
}

func ghPerson(u *github.User) Person { return Person{Login: u.GetLogin(), ID: u.GetID()} }

// ghPerPage is the largest page GitHub answers.
const ghPerPage = 100

// Issue implements API: GitHub answers a pull request's conversation as an
// issue.
func (g *GitHub) Issue(ctx context.Context, tok token.Token, repo string, number int, _ bool) (Issue, error) {
	owner, name, c, err := g.open(tok, repo)
	if err != nil {
		return Issue{}, err
	}
	is, resp, err := c.Issues.Get(ctx, owner, name, number)
	if err != nil {
		return Issue{}, token.ClassifyHTTP(resp, err)
	}
	out := Issue{Number: is.GetNumber(), Title: is.GetTitle(), Body: is.GetBody(), State: is.GetState(),
		URL: is.GetHTMLURL(), Author: ghPerson(is.GetUser())}
	for _, l := range is.Labels {
		out.Labels = append(out.Labels, l.GetName())
	}
	return out, nil
}

// ChangedFiles implements API: the pull request says how many files it
// changes; its files are read a page at a time up to limit.
func (g *GitHub) ChangedFiles(ctx context.Context, tok token.Token, repo string, number, limit int) ([]jobs.EventFile, int, error) {
	owner, name, c, err := g.open(tok, repo)
	if err != nil {
		return nil, 0, err
	}
	pr, resp, err := c.PullRequests.Get(ctx, owner, name, number)
	if err != nil {
		return nil, 0, token.ClassifyHTTP(resp, err)
	}
	var out []jobs.EventFile
	for page := 1; page > 0 && len(out) < limit; {
		files, resp, err := c.PullRequests.ListFiles(ctx, owner, name, number, &github.ListOptions{Page: page, PerPage: ghPerPage})
		if err != nil {
			return nil, 0, token.ClassifyHTTP(resp, err)
		}
		for _, f := range files {
			out = append(out, jobs.EventFile{Path: f.GetFilename(), Status: f.GetStatus(), Additions: f.GetAdditions(), Deletions: f.GetDeletions()})
		}
		page = resp.NextPage
	}
	out = out[:min(len(out), limit)]
	return out, max(pr.GetChangedFiles(), len(out)), nil
}

// GetComment implements API.
func (g *GitHub) GetComment(ctx context.Context, tok token.Token, repo string, _ int, _ bool, id int64) (IssueComment, error) {
	owner, name, c, err := g.open(tok, repo)
	if err != nil {
		return IssueComment{}, err
	}
	cm, resp, err := c.Issues.GetComment(ctx, owner, name, id)
	if err != nil {
		return IssueComment{}, token.ClassifyHTTP(resp, err)
	}
	return ghComment(cm), nil
}

func ghComment(cm *github.IssueComment) IssueComment {
	return IssueComment{ID: cm.GetID(), Author: ghPerson(cm.GetUser()), Body: cm.GetBody(), Created: cm.GetCreatedAt().Time}
}

// LastComments implements API. An issue's comments come oldest first and
// cannot be asked newest first, so they are read from the last page back
// until n are in hand.
func (g *GitHub) LastComments(ctx context.Context, tok token.Token, repo string, number int, _ bool, n int) ([]IssueComment, int, error) {
	owner, name, c, err := g.open(tok, repo)
	if err != nil {
		return nil, 0, err
	}
	var got []*github.IssueComment
	total, err := ghBackwards(func(p int) ([]*github.IssueComment, *github.Response, error) {
		return c.Issues.ListComments(ctx, owner, name, number, &github.IssueListCommentsOptions{
			ListOptions: github.ListOptions{Page: p, PerPage: ghPerPage}})
	}, n/ghPerPage+2, func(page []*github.IssueComment) bool {
		got = append(append([]*github.IssueComment(nil), page...), got...)
		return len(got) >= n
	})
	if err != nil {
		return nil, 0, err
	}
	got = got[max(len(got)-n, 0):]
	out := make([]IssueComment, 0, len(got))
	for _, cm := range got {
		out = append(out, ghComment(cm))
	}
	return out, total, nil
}

// ghBackwards reads a list GitHub answers oldest first from its last page
// back (the first page says which is the last), handing visit each page
// until it says done or limit pages were visited. It answers how many items
// the list holds.
func ghBackwards[T any](list func(page int) ([]T, *github.Response, error), limit int, visit func([]T) bool) (int, error) {
	first, resp, err := list(1)
	if err != nil {
		return 0, token.ClassifyHTTP(resp, err)
	}
	last := max(resp.LastPage, 1)
	items, total := first, len(first)
	for p, visited := last, 0; p >= 1 && visited < limit; p, visited = p-1, visited+1 {
		if p > 1 {
			if items, resp, err = list(p); err != nil {
				return 0, token.ClassifyHTTP(resp, err)
			}
		} else {
			items = first
		}
		if p == last {
			total = (last-1)*ghPerPage + len(items)
		}
		if visit(items) {
			break
		}
	}
	return total, nil
}

// Review implements API.
func (g *GitHub) Review(ctx context.Context, tok token.Token, repo string, number int, id int64, maxNotes int) (*Review, error) {
	owner, name, c, err := g.open(tok, repo)
	if err != nil {
		return nil, err
	}
	rv, resp, err := c.PullRequests.GetReview(ctx, owner, name, number, id)
	if err != nil {
		return nil, token.ClassifyHTTP(resp, err)
	}
	notes, resp, err := c.PullRequests.ListReviewComments(ctx, owner, name, number, id,
		&github.ListOptions{PerPage: min(max(maxNotes, 1), ghPerPage)})
	if err != nil {
		return nil, token.ClassifyHTTP(resp, err)
	}
	out := &Review{ID: rv.GetID(), State: strings.ToLower(rv.GetState()), Author: ghPerson(rv.GetUser()), Body: rv.GetBody()}
	for _, nt := range notes[:min(len(notes), maxNotes)] {
		line := nt.GetLine()
		if line == 0 {
			line = nt.GetOriginalLine()
		}
		out.Notes = append(out.Notes, ReviewNote{ID: nt.GetID(), Path: nt.GetPath(), Line: line, Author: ghPerson(nt.GetUser()), Body: nt.GetBody()})
	}
	return out, nil
}

// labelEventPages bounds how far back the issue's events are searched for
// the label's adding.
const labelEventPages = 5

// LabelAddedBy implements API: the latest "labeled" event of the issue's
// events for that label, read from the last page back.
func (g *GitHub) LabelAddedBy(ctx context.Context, tok token.Token, repo string, number int, _ bool, label string) (Person, error) {
	owner, name, c, err := g.open(tok, repo)
	if err != nil {
		return Person{}, err
	}
	var who Person
	_, err = ghBackwards(func(p int) ([]*github.IssueEvent, *github.Response, error) {
		return c.Issues.ListIssueEvents(ctx, owner, name, number, &github.ListOptions{Page: p, PerPage: ghPerPage})
	}, labelEventPages, func(events []*github.IssueEvent) bool {
		for i := len(events) - 1; i >= 0; i-- {
			if e := events[i]; e.GetEvent() == "labeled" && e.GetLabel().GetName() == label {
				who = ghPerson(e.GetActor())
				return true
			}
		}
		return false
	})
	return who, err
}

// Permission implements API: the role's name where it is one of GitHub's
// five, else the permission; a person GitHub does not know has none.
func (g *GitHub) Permission(ctx context.Context, tok token.Token, repo string, who Person) (string, error) {
	owner, name, c, err := g.open(tok, repo)
	if err != nil {
		return "", err
	}
	lvl, resp, err := c.Repositories.GetPermissionLevel(ctx, owner, name, who.Login)
	if resp != nil && resp.StatusCode == http.StatusNotFound {
		return jobs.PermissionNone, nil
	}
	if err != nil {
		return "", token.ClassifyHTTP(resp, err)
	}
	switch role := lvl.GetRoleName(); role {
	case "admin", "maintain", "write", "triage", "read":
		return role, nil
	}
	return lvl.GetPermission(), nil
}

// Self implements API: a GitHub App's bot (GET /app with the App's JWT
// names its slug, GET /users/<slug>[bot] its user), else the token's user
// (GET /user).
func (g *GitHub) Self(ctx context.Context, minter token.Minter, tok token.Token) (Person, error) {
	if app, ok := minter.(*token.GitHubApp); ok {
		jwt, err := app.JWT()
		if err != nil {
			return Person{}, err
		}
		c, err := token.NewGitHubClient(g.APIURL, g.HTTPClient, jwt)
		if err != nil {
			return Person{}, err
		}
		a, resp, err := c.Apps.Get(ctx, "")
		if err != nil {
			return Person{}, token.ClassifyHTTP(resp, err)
		}
		if a.GetSlug() == "" {
			return Person{}, fmt.Errorf("github app: no slug")
		}
		if c, err = g.client(tok); err != nil {
			return Person{}, err
		}
		u, resp, err := c.Users.Get(ctx, a.GetSlug()+"[bot]")
		if err != nil {
			return Person{}, token.ClassifyHTTP(resp, err)
		}
		return ghPerson(u), nil
	}
	c, err := g.client(tok)
	if err != nil {
		return Person{}, err
	}
	u, resp, err := c.Users.Get(ctx, "")
	if err != nil {
		return Person{}, token.ClassifyHTTP(resp, err)
	}
	return ghPerson(u), nil
}

// ReplyToReviewComment implements API.
func (g *GitHub) ReplyToReviewComment(ctx context.Context, tok token.Token, repo string, number int, r ReviewReply) error {
	owner, name, c, err := g.open(tok, repo)
	if err != nil {
		return err
	}
	_, resp, err := c.PullRequests.CreateCommentInReplyTo(ctx, owner, name, number, r.Body, r.To)
	if err != nil {
		return token.ClassifyHTTP(resp, err)
	}
	return nil
}

// CreateReview implements API: one review, event COMMENT, each comment on
// the right (new) side of its line.
func (g *GitHub) CreateReview(ctx context.Context, tok token.Token, repo string, number int, rv NewReview) error {
	owner, name, c, err := g.open(tok, repo)
	if err != nil {
		return err
	}
	req := &github.PullRequestReviewRequest{CommitID: github.Ptr(rv.Commit), Event: github.Ptr("COMMENT")}
	if rv.Body != "" {
		req.Body = github.Ptr(rv.Body)
	}
	for _, cm := range rv.Comments {
		req.Comments = append(req.Comments, &github.DraftReviewComment{Path: github.Ptr(cm.Path), Line: github.Ptr(cm.Line),
			Side: github.Ptr("RIGHT"), Body: github.Ptr(cm.Body)})
	}
	_, resp, err := c.PullRequests.CreateReview(ctx, owner, name, number, req)
	if err != nil {
		return token.ClassifyHTTP(resp, err)
	}
	return nil
}

// EditLabels implements API: GitHub labels a pull request as an issue.
func (g *GitHub) EditLabels(ctx context.Context, tok token.Token, repo string, number int, _ bool, add, remove []string) error {
	owner, name, c, err := g.open(tok, repo)
	if err != nil {
		return err
	}
	if len(add) > 0 {
		if _, resp, err := c.Issues.AddLabelsToIssue(ctx, owner, name, number, add); err != nil {
			return token.ClassifyHTTP(resp, err)
		}
	}
	for _, l := range remove {
		resp, err := c.Issues.RemoveLabelForIssue(ctx, owner, name, number, l)
		if resp != nil && resp.StatusCode == http.StatusNotFound {
			continue // not on it
		}
		if err != nil {
			return token.ClassifyHTTP(resp, err)
		}
	}
	return nil
}
