package workspace

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"code.gitea.io/sdk/gitea"

	"github.com/pidispatch/pidispatch/forge/token"
	"github.com/pidispatch/pidispatch/jobs"
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
	if resp == nil {
		return token.ClassifyResponse(nil, err)
	}
	return token.ClassifyResponse(resp.Response, err)
}

// ForgeURL is URL, the instance's web root, where it serves git too.
func (g *Gitea) ForgeURL() string { return g.URL }

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
	return Repository{ID: r.ID, CloneURL: r.CloneURL, DefaultBranch: r.DefaultBranch, WebURL: r.HTMLURL}, nil
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
		h.SHA, h.Head = pr.Head.Sha, pr.Head.Ref
		if pr.Head.Repository != nil && strings.EqualFold(pr.Head.Repository.FullName, repo) {
			h.Branch = pr.Head.Ref
		}
	}
	if pr.Base != nil {
		h.Base = pr.Base.Ref
	}
	h.Author, h.Body = giteaPerson(pr.Poster), pr.Body
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
func (g *Gitea) Comment(ctx context.Context, tok token.Token, repo string, number int, _ bool, body string) (int64, error) {
	owner, name, err := splitRepo(repo)
	if err != nil {
		return 0, err
	}
	c, err := g.client(ctx, tok)
	if err != nil {
		return 0, err
	}
	cm, resp, err := c.CreateIssueComment(owner, name, int64(number), gitea.CreateIssueCommentOption{Body: body})
	if err != nil {
		return 0, giteaErr(resp, err)
	}
	return cm.ID, nil
}

// EditComment implements API.
func (g *Gitea) EditComment(ctx context.Context, tok token.Token, repo string, _ int, _ bool, id int64, body string) error {
	owner, name, err := splitRepo(repo)
	if err != nil {
		return err
	}
	c, err := g.client(ctx, tok)
	if err != nil {
		return err
	}
	_, resp, err := c.EditIssueComment(owner, name, id, gitea.EditIssueCommentOption{Body: body})
	if err != nil {
		return giteaErr(resp, err)
	}
	return nil
}

// giteaPageSize is the page Gitea and Forgejo answer by default at most.
const giteaPageSize = 50

func giteaPerson(u *gitea.User) Person {
	if u == nil {
		return Person{}
	}
	return Person{Login: u.UserName, ID: u.ID}
}

// Issue implements API: an issue, or a pull request's conversation (they
// share their numbers).
func (g *Gitea) Issue(ctx context.Context, tok token.Token, repo string, number int, _ bool) (Issue, error) {
	owner, name, c, err := g.open(ctx, tok, repo)
	if err != nil {
		return Issue{}, err
	}
	is, resp, err := c.GetIssue(owner, name, int64(number))
	if err != nil {
		return Issue{}, giteaErr(resp, err)
	}
	out := Issue{Number: int(is.Index), Title: is.Title, Body: is.Body, State: string(is.State), URL: is.HTMLURL,
		Author: giteaPerson(is.Poster)}
	for _, l := range is.Labels {
		out.Labels = append(out.Labels, l.Name)
	}
	return out, nil
}

func (g *Gitea) open(ctx context.Context, tok token.Token, repo string) (owner, name string, c *gitea.Client, err error) {
	if owner, name, err = splitRepo(repo); err != nil {
		return "", "", nil, err
	}
	c, err = g.client(ctx, tok)
	return owner, name, c, err
}

// ChangedFiles implements API: a page at a time up to limit; the forge
// counts them (X-Total-Count).
func (g *Gitea) ChangedFiles(ctx context.Context, tok token.Token, repo string, number, limit int) ([]jobs.EventFile, int, error) {
	owner, name, c, err := g.open(ctx, tok, repo)
	if err != nil {
		return nil, 0, err
	}
	var out []jobs.EventFile
	total := 0
	for page := 1; page > 0 && len(out) < limit; {
		files, resp, err := c.ListPullRequestFiles(owner, name, int64(number), gitea.ListPullRequestFilesOptions{
			ListOptions: gitea.ListOptions{Page: page, PageSize: giteaPageSize}})
		if err != nil {
			return nil, 0, giteaErr(resp, err)
		}
		if n, err := strconv.Atoi(resp.Header.Get("X-Total-Count")); err == nil {
			total = n
		}
		for _, f := range files {
			out = append(out, jobs.EventFile{Path: f.Filename, Status: f.Status, Additions: f.Additions, Deletions: f.Deletions})
		}
		page = resp.NextPage
		if len(files) < giteaPageSize {
			page = 0
		}
	}
	out = out[:min(len(out), limit)]
	return out, max(total, len(out)), nil
}

// GetComment implements API.
func (g *Gitea) GetComment(ctx context.Context, tok token.Token, repo string, _ int, _ bool, id int64) (IssueComment, error) {
	owner, name, c, err := g.open(ctx, tok, repo)
	if err != nil {
		return IssueComment{}, err
	}
	cm, resp, err := c.GetIssueComment(owner, name, id)
	if err != nil {
		return IssueComment{}, giteaErr(resp, err)
	}
	return giteaComment(cm), nil
}

func giteaComment(cm *gitea.Comment) IssueComment {
	return IssueComment{ID: cm.ID, Author: giteaPerson(cm.Poster), Body: cm.Body, Created: cm.Created}
}

// LastComments implements API. The comments API answers the whole thread
// at once (it takes no page), oldest first, comments only.
func (g *Gitea) LastComments(ctx context.Context, tok token.Token, repo string, number int, _ bool, n int) ([]IssueComment, int, error) {
	owner, name, c, err := g.open(ctx, tok, repo)
	if err != nil {
		return nil, 0, err
	}
	all, resp, err := c.ListIssueComments(owner, name, int64(number), gitea.ListIssueCommentOptions{})
	if err != nil {
		return nil, 0, giteaErr(resp, err)
	}
	last := all[max(len(all)-n, 0):]
	out := make([]IssueComment, 0, len(last))
	for _, cm := range last {
		out = append(out, giteaComment(cm))
	}
	return out, len(all), nil
}

// giteaReviewStates are Gitea's review states in the words of GitHub's
// (and of a trigger's reviewState).
var giteaReviewStates = map[gitea.ReviewStateType]string{
	gitea.ReviewStateApproved: "approved", gitea.ReviewStateRequestChanges: "changes_requested", gitea.ReviewStateComment: "commented",
}

// Review implements API.
func (g *Gitea) Review(ctx context.Context, tok token.Token, repo string, number int, id int64, maxNotes int) (*Review, error) {
	owner, name, c, err := g.open(ctx, tok, repo)
	if err != nil {
		return nil, err
	}
	rv, resp, err := c.GetPullReview(owner, name, int64(number), id)
	if err != nil {
		return nil, giteaErr(resp, err)
	}
	notes, resp, err := c.ListPullReviewComments(owner, name, int64(number), id)
	if err != nil {
		return nil, giteaErr(resp, err)
	}
	state, ok := giteaReviewStates[rv.State]
	if !ok {
		state = strings.ToLower(string(rv.State))
	}
	out := &Review{ID: rv.ID, State: state, Author: giteaPerson(rv.Reviewer), Body: rv.Body}
	for _, nt := range notes[:min(len(notes), maxNotes)] {
		out.Notes = append(out.Notes, ReviewNote{ID: nt.ID, Path: nt.Path, Line: int(nt.LineNum), Author: giteaPerson(nt.Reviewer), Body: nt.Body})
	}
	return out, nil
}

// giteaTimelinePages bounds the timeline pages read for a label's adding.
const giteaTimelinePages = 20

// giteaTimelineEntry is an entry of an issue's timeline. The SDK's own
// TimelineComment declares "label" a list, while Gitea and Forgejo send one
// object, so the SDK cannot read a label entry: this type reads what the
// search needs, in the SDK's types.
type giteaTimelineEntry struct {
	Type   string       `json:"type"`
	Body   string       `json:"body"`
	Poster *gitea.User  `json:"user"`
	Label  *gitea.Label `json:"label"`
}

// LabelAddedBy implements API: the latest "label" entry of the issue's
// timeline adding that label (its body is "1" for an add). The timeline
// says no total, so it is read from the first page on, at most
// giteaTimelinePages.
func (g *Gitea) LabelAddedBy(ctx context.Context, tok token.Token, repo string, number int, _ bool, label string) (Person, error) {
	owner, name, err := splitRepo(repo)
	if err != nil {
		return Person{}, err
	}
	var who Person
	for page := 1; page <= giteaTimelinePages; page++ {
		entries, err := g.timelinePage(ctx, tok, owner, name, number, page)
		if err != nil {
			return Person{}, err
		}
		for _, e := range entries {
			if e.Type == "label" && e.Body == "1" && e.Label != nil && e.Label.Name == label {
				who = giteaPerson(e.Poster)
			}
		}
		if len(entries) == 0 {
			break // a page may be short of what it filtered out, so only an empty one ends the timeline
		}
	}
	return who, nil
}

// maxTimelinePage bounds one timeline page's answer.
const maxTimelinePage = 8 << 20

// timelinePage reads one page of the issue's timeline with the token, over
// the client the SDK would use (no redirect followed).
func (g *Gitea) timelinePage(ctx context.Context, tok token.Token, owner, name string, number, page int) ([]giteaTimelineEntry, error) {
	u := fmt.Sprintf("%s/api/v1/repos/%s/%s/issues/%d/timeline?page=%d&limit=%d", strings.TrimSuffix(g.URL, "/"),
		url.PathEscape(owner), url.PathEscape(name), number, page, giteaPageSize)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "token "+tok.Reveal())
	req.Header.Set("Accept", "application/json")
	hc := g.HTTPClient
	if hc == nil {
		hc = token.NoRedirectClient()
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%w: timeline: %w", token.ErrUnavailable, err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return nil, token.ClassifyStatus(resp.StatusCode, fmt.Errorf("timeline: %s", resp.Status))
	}
	var entries []giteaTimelineEntry
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxTimelinePage)).Decode(&entries); err != nil {
		return nil, fmt.Errorf("timeline: %w", err)
	}
	return entries, nil
}

// Permission implements API: the collaborator permission, owner shown as
// admin; a user Gitea does not know has none.
func (g *Gitea) Permission(ctx context.Context, tok token.Token, repo string, who Person) (string, error) {
	owner, name, c, err := g.open(ctx, tok, repo)
	if err != nil {
		return "", err
	}
	p, resp, err := c.CollaboratorPermission(owner, name, who.Login)
	if resp != nil && resp.StatusCode == http.StatusNotFound {
		return jobs.PermissionNone, nil
	}
	if err != nil {
		return "", giteaErr(resp, err)
	}
	switch p.Permission {
	case gitea.AccessModeOwner, gitea.AccessModeAdmin:
		return "admin", nil
	case gitea.AccessModeWrite:
		return "write", nil
	case gitea.AccessModeRead:
		return "read", nil
	case gitea.AccessModeNone:
		return jobs.PermissionNone, nil
	}
	return "", fmt.Errorf("gitea permission %q", p.Permission)
}

// Self implements API: the token's user.
func (g *Gitea) Self(ctx context.Context, _ token.Minter, tok token.Token) (Person, error) {
	c, err := g.client(ctx, tok)
	if err != nil {
		return Person{}, err
	}
	u, resp, err := c.GetMyUserInfo()
	if err != nil {
		return Person{}, giteaErr(resp, err)
	}
	return giteaPerson(u), nil
}

// ReplyToReviewComment implements API: Gitea's reply to a review comment
// (1.27); a forge without that route (it answers 404 or 405) gets the reply
// as a review comment on the same line, which it shows in the same
// conversation.
func (g *Gitea) ReplyToReviewComment(ctx context.Context, tok token.Token, repo string, number int, r ReviewReply) error {
	owner, name, c, err := g.open(ctx, tok, repo)
	if err != nil {
		return err
	}
	_, resp, err := c.CreatePullReviewCommentReply(owner, name, int64(number), r.To, gitea.CreatePullReviewCommentReplyOptions{Body: r.Body})
	if err == nil {
		return nil
	}
	if resp == nil || (resp.StatusCode != http.StatusNotFound && resp.StatusCode != http.StatusMethodNotAllowed) || r.Path == "" || r.Line <= 0 {
		return giteaErr(resp, err)
	}
	return g.CreateReview(ctx, tok, repo, number, NewReview{Comments: []InlineComment{{Path: r.Path, Line: r.Line, Body: r.Body}}})
}

// CreateReview implements API: one review of state COMMENT holding every
// comment, each on the new side of its line.
func (g *Gitea) CreateReview(ctx context.Context, tok token.Token, repo string, number int, rv NewReview) error {
	owner, name, c, err := g.open(ctx, tok, repo)
	if err != nil {
		return err
	}
	opt := gitea.CreatePullReviewOptions{State: gitea.ReviewStateComment, CommitID: rv.Commit, Body: rv.Body}
	for _, cm := range rv.Comments {
		opt.Comments = append(opt.Comments, gitea.CreatePullReviewComment{Path: cm.Path, Body: cm.Body, NewLineNum: int64(cm.Line)})
	}
	if _, resp, err := c.CreatePullReview(owner, name, int64(number), opt); err != nil {
		return giteaErr(resp, err)
	}
	return nil
}

// EditLabels implements API: Gitea labels by id, so the repository's
// labels are read (at most giteaLabelPages pages) to find them; a name the
// repository has no label of is an error.
func (g *Gitea) EditLabels(ctx context.Context, tok token.Token, repo string, number int, _ bool, add, remove []string) error {
	if len(add) == 0 && len(remove) == 0 {
		return nil
	}
	owner, name, c, err := g.open(ctx, tok, repo)
	if err != nil {
		return err
	}
	ids := map[string]int64{}
	for page := 1; page <= giteaLabelPages; page++ {
		labels, resp, err := c.ListRepoLabels(owner, name, gitea.ListLabelsOptions{ListOptions: gitea.ListOptions{Page: page, PageSize: giteaPageSize}})
		if err != nil {
			return giteaErr(resp, err)
		}
		for _, l := range labels {
			ids[l.Name] = l.ID
		}
		if len(labels) < giteaPageSize {
			break
		}
	}
	var addIDs []int64
	for _, l := range add {
		id, ok := ids[l]
		if !ok {
			return fmt.Errorf("the repository has no label %q", l)
		}
		addIDs = append(addIDs, id)
	}
	if len(addIDs) > 0 {
		if _, resp, err := c.AddIssueLabels(owner, name, int64(number), gitea.IssueLabelsOption{Labels: addIDs}); err != nil {
			return giteaErr(resp, err)
		}
	}
	for _, l := range remove {
		id, ok := ids[l]
		if !ok {
			continue // no such label: not on it either
		}
		resp, err := c.DeleteIssueLabel(owner, name, int64(number), id)
		if resp != nil && resp.StatusCode == http.StatusNotFound {
			continue
		}
		if err != nil {
			return giteaErr(resp, err)
		}
	}
	return nil
}

// giteaLabelPages bounds the pages of a repository's labels read.
const giteaLabelPages = 10
