package workspace

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"

	gitlab "gitlab.com/gitlab-org/api/client-go/v2"

	"github.com/pidispatch/pidispatch/forge/token"
	"github.com/pidispatch/pidispatch/jobs"
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
	if resp == nil {
		return token.ClassifyResponse(nil, err)
	}
	return token.ClassifyResponse(resp.Response, err)
}

// ForgeURL is URL, the instance's web root, where it serves git too.
func (g *GitLab) ForgeURL() string { return g.URL }

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
	return Repository{ID: p.ID, CloneURL: p.HTTPURLToRepo, DefaultBranch: p.DefaultBranch, WebURL: p.WebURL}, nil
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
	h := PullHead{Ref: fmt.Sprintf("refs/merge-requests/%d/head", number), SHA: mr.SHA, Base: mr.TargetBranch, Head: mr.SourceBranch,
		Body: mr.Description}
	if mr.SourceProjectID == mr.ProjectID {
		h.Branch = mr.SourceBranch
	}
	if mr.Author != nil {
		h.Author = Person{Login: mr.Author.Username, ID: mr.Author.ID}
		if h.AuthorBot, err = g.projectBot(ctx, c, mr.ProjectID, mr.Author.ID, mr.Author.Username); err != nil {
			return PullHead{}, err
		}
	}
	return h, nil
}

// projectBot reports whether user is a bot user of project: the user a
// project access token acts as, named project_<project id>_bot... and a
// bot by GitLab's own word (GET /users/:id).
func (g *GitLab) projectBot(ctx context.Context, c *gitlab.Client, project, id int64, login string) (bool, error) {
	if !strings.HasPrefix(login, fmt.Sprintf("project_%d_bot", project)) {
		return false, nil
	}
	u, resp, err := c.Users.GetUser(id, nil, gitlab.WithContext(ctx))
	if resp != nil && resp.StatusCode == http.StatusNotFound {
		return false, nil
	}
	if err != nil {
		return false, gitlabErr(resp, err)
	}
	return u.Bot && u.Username == login, nil
}

// BranchProtected implements API: a protection rule names the branch or a
// wildcard pattern matching it, by GitLab's rule (gitlabProtects).
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
			if gitlabProtects(r.Name, branch) {
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
func (g *GitLab) Comment(ctx context.Context, tok token.Token, repo string, number int, pullRequest bool, body string) (int64, error) {
	c, err := g.client(tok)
	if err != nil {
		return 0, err
	}
	var resp *gitlab.Response
	var n *gitlab.Note
	if pullRequest {
		n, resp, err = c.Notes.CreateMergeRequestNote(repo, int64(number), &gitlab.CreateMergeRequestNoteOptions{Body: gitlab.Ptr(body)}, gitlab.WithContext(ctx))
	} else {
		n, resp, err = c.Notes.CreateIssueNote(repo, int64(number), &gitlab.CreateIssueNoteOptions{Body: gitlab.Ptr(body)}, gitlab.WithContext(ctx))
	}
	if err != nil {
		return 0, gitlabErr(resp, err)
	}
	if n == nil {
		return 0, nil // a note of commands only: GitLab keeps none
	}
	return n.ID, nil
}

// EditComment implements API: the note's text.
func (g *GitLab) EditComment(ctx context.Context, tok token.Token, repo string, number int, pullRequest bool, id int64, body string) error {
	c, err := g.client(tok)
	if err != nil {
		return err
	}
	var resp *gitlab.Response
	if pullRequest {
		_, resp, err = c.Notes.UpdateMergeRequestNote(repo, int64(number), id, &gitlab.UpdateMergeRequestNoteOptions{Body: gitlab.Ptr(body)}, gitlab.WithContext(ctx))
	} else {
		_, resp, err = c.Notes.UpdateIssueNote(repo, int64(number), id, &gitlab.UpdateIssueNoteOptions{Body: gitlab.Ptr(body)}, gitlab.WithContext(ctx))
	}
	if err != nil {
		return gitlabErr(resp, err)
	}
	return nil
}

// glPerPage is the largest page GitLab answers.
const glPerPage = 100

// glPages bounds the pages one read of a list goes through.
const glPages = 10

// Issue implements API: an issue, or a merge request's description.
func (g *GitLab) Issue(ctx context.Context, tok token.Token, repo string, number int, pullRequest bool) (Issue, error) {
	c, err := g.client(tok)
	if err != nil {
		return Issue{}, err
	}
	if pullRequest {
		mr, resp, err := c.MergeRequests.GetMergeRequest(repo, int64(number), nil, gitlab.WithContext(ctx))
		if err != nil {
			return Issue{}, gitlabErr(resp, err)
		}
		out := Issue{Number: int(mr.IID), Title: mr.Title, Body: mr.Description, State: mr.State, URL: mr.WebURL, Labels: mr.Labels}
		if mr.Author != nil {
			out.Author = Person{Login: mr.Author.Username, ID: mr.Author.ID}
		}
		return out, nil
	}
	is, resp, err := c.Issues.GetIssue(repo, int64(number), gitlab.WithContext(ctx))
	if err != nil {
		return Issue{}, gitlabErr(resp, err)
	}
	out := Issue{Number: int(is.IID), Title: is.Title, Body: is.Description, State: is.State, URL: is.WebURL, Labels: is.Labels}
	if is.Author != nil {
		out.Author = Person{Login: is.Author.Username, ID: is.Author.ID}
	}
	return out, nil
}

// ChangedFiles implements API: the merge request's diffs, a page at a time
// up to limit; GitLab counts them (X-Total), and the lines each adds and
// removes are counted in its diff.
func (g *GitLab) ChangedFiles(ctx context.Context, tok token.Token, repo string, number, limit int) ([]jobs.EventFile, int, error) {
	c, err := g.client(tok)
	if err != nil {
		return nil, 0, err
	}
	var out []jobs.EventFile
	total := 0
	for page := int64(1); page > 0 && len(out) < limit; {
		diffs, resp, err := c.MergeRequests.ListMergeRequestDiffs(repo, int64(number), &gitlab.ListMergeRequestDiffsOptions{
			ListOptions: gitlab.ListOptions{Page: page, PerPage: glPerPage}}, gitlab.WithContext(ctx))
		if err != nil {
			return nil, 0, gitlabErr(resp, err)
		}
		total = max(total, int(resp.TotalItems))
		for _, d := range diffs {
			out = append(out, glFile(d))
		}
		page = resp.NextPage
	}
	out = out[:min(len(out), limit)]
	return out, max(total, len(out)), nil
}

func glFile(d *gitlab.MergeRequestDiff) jobs.EventFile {
	f := jobs.EventFile{Path: d.NewPath, Status: "modified"}
	switch {
	case d.NewFile:
		f.Status = "added"
	case d.DeletedFile:
		f.Status, f.Path = "removed", d.OldPath
	case d.RenamedFile:
		f.Status = "renamed"
	}
	for line := range strings.SplitSeq(d.Diff, "\n") {
		switch {
		case strings.HasPrefix(line, "+"):
			f.Additions++
		case strings.HasPrefix(line, "-"):
			f.Deletions++
		}
	}
	return f
}

// GetComment implements API: a note of the issue or the merge request.
func (g *GitLab) GetComment(ctx context.Context, tok token.Token, repo string, number int, pullRequest bool, id int64) (IssueComment, error) {
	c, err := g.client(tok)
	if err != nil {
		return IssueComment{}, err
	}
	var n *gitlab.Note
	var resp *gitlab.Response
	if pullRequest {
		n, resp, err = c.Notes.GetMergeRequestNote(repo, int64(number), id, gitlab.WithContext(ctx))
	} else {
		n, resp, err = c.Notes.GetIssueNote(repo, int64(number), id, gitlab.WithContext(ctx))
	}
	if err != nil {
		return IssueComment{}, gitlabErr(resp, err)
	}
	return glComment(n), nil
}

func glComment(n *gitlab.Note) IssueComment {
	out := IssueComment{ID: n.ID, Author: Person{Login: n.Author.Username, ID: n.Author.ID}, Body: n.Body}
	if n.CreatedAt != nil {
		out.Created = *n.CreatedAt
	}
	return out
}

// LastComments implements API: the notes newest first, GitLab's own notes
// of events (system notes) skipped; the issue's (or merge request's) count
// of its people's notes is the total.
func (g *GitLab) LastComments(ctx context.Context, tok token.Token, repo string, number int, pullRequest bool, n int) ([]IssueComment, int, error) {
	c, err := g.client(tok)
	if err != nil {
		return nil, 0, err
	}
	total, err := g.userNotes(ctx, c, repo, number, pullRequest)
	if err != nil {
		return nil, 0, err
	}
	var newest []IssueComment
	for page := int64(1); page > 0 && page <= glPages && len(newest) < n; {
		notes, resp, err := g.notesPage(ctx, c, repo, number, pullRequest, page)
		if err != nil {
			return nil, 0, err
		}
		for _, nt := range notes {
			if !nt.System && len(newest) < n {
				newest = append(newest, glComment(nt))
			}
		}
		page = resp.NextPage
	}
	slices.Reverse(newest)
	return newest, max(total, len(newest)), nil
}

// userNotes is the count GitLab keeps of an issue's or a merge request's
// notes written by people.
func (g *GitLab) userNotes(ctx context.Context, c *gitlab.Client, repo string, number int, pullRequest bool) (int, error) {
	if pullRequest {
		mr, resp, err := c.MergeRequests.GetMergeRequest(repo, int64(number), nil, gitlab.WithContext(ctx))
		if err != nil {
			return 0, gitlabErr(resp, err)
		}
		return int(mr.UserNotesCount), nil
	}
	is, resp, err := c.Issues.GetIssue(repo, int64(number), gitlab.WithContext(ctx))
	if err != nil {
		return 0, gitlabErr(resp, err)
	}
	return int(is.UserNotesCount), nil
}

// notesPage reads one page of an issue's or a merge request's notes, newest
// first.
func (g *GitLab) notesPage(ctx context.Context, c *gitlab.Client, repo string, number int, pullRequest bool, page int64) ([]*gitlab.Note, *gitlab.Response, error) {
	list := gitlab.ListOptions{Page: page, PerPage: glPerPage}
	order, sort := gitlab.Ptr("created_at"), gitlab.Ptr("desc")
	var notes []*gitlab.Note
	var resp *gitlab.Response
	var err error
	if pullRequest {
		notes, resp, err = c.Notes.ListMergeRequestNotes(repo, int64(number),
			&gitlab.ListMergeRequestNotesOptions{ListOptions: list, OrderBy: order, Sort: sort}, gitlab.WithContext(ctx))
	} else {
		notes, resp, err = c.Notes.ListIssueNotes(repo, int64(number),
			&gitlab.ListIssueNotesOptions{ListOptions: list, OrderBy: order, Sort: sort}, gitlab.WithContext(ctx))
	}
	if err != nil {
		return nil, nil, gitlabErr(resp, err)
	}
	return notes, resp, nil
}

// Review implements API: GitLab has no reviews with a body and a state (an
// approval carries no text), so there is none to read.
func (g *GitLab) Review(context.Context, token.Token, string, int, int64, int) (*Review, error) {
	return nil, nil
}

// LabelAddedBy implements API: the latest "add" of the label among the
// resource label events, which come oldest first: the first page says how
// many pages there are, and they are read from the last back.
func (g *GitLab) LabelAddedBy(ctx context.Context, tok token.Token, repo string, number int, pullRequest bool, label string) (Person, error) {
	c, err := g.client(tok)
	if err != nil {
		return Person{}, err
	}
	first, resp, err := g.labelEvents(ctx, c, repo, number, pullRequest, 1)
	if err != nil {
		return Person{}, err
	}
	for page, visited := max(resp.TotalPages, 1), 0; page >= 1 && visited < labelEventPages; page, visited = page-1, visited+1 {
		events := first
		if page > 1 {
			if events, _, err = g.labelEvents(ctx, c, repo, number, pullRequest, page); err != nil {
				return Person{}, err
			}
		}
		for i := len(events) - 1; i >= 0; i-- {
			if e := events[i]; e.Action == "add" && e.Label.Name == label {
				return Person{Login: e.User.Username, ID: e.User.ID}, nil
			}
		}
	}
	return Person{}, nil
}

func (g *GitLab) labelEvents(ctx context.Context, c *gitlab.Client, repo string, number int, pullRequest bool, page int64) ([]*gitlab.LabelEvent, *gitlab.Response, error) {
	opt := &gitlab.ListLabelEventsOptions{ListOptions: gitlab.ListOptions{Page: page, PerPage: glPerPage}}
	var events []*gitlab.LabelEvent
	var resp *gitlab.Response
	var err error
	if pullRequest {
		events, resp, err = c.ResourceLabelEvents.ListMergeRequestsLabelEvents(repo, int64(number), opt, gitlab.WithContext(ctx))
	} else {
		events, resp, err = c.ResourceLabelEvents.ListIssueLabelEvents(repo, int64(number), opt, gitlab.WithContext(ctx))
	}
	if err != nil {
		return nil, nil, gitlabErr(resp, err)
	}
	return events, resp, nil
}

// Permission implements API: the person's access level on the project,
// inherited membership included, in GitHub's words (Owner admin,
// Maintainer maintain, Developer write, Planner and Reporter triage, Guest
// read); one who is no member has none.
func (g *GitLab) Permission(ctx context.Context, tok token.Token, repo string, who Person) (string, error) {
	c, err := g.client(tok)
	if err != nil {
		return "", err
	}
	if who.ID == 0 {
		return "", fmt.Errorf("gitlab permission of %q: no user id", who.Login)
	}
	m, resp, err := c.ProjectMembers.GetInheritedProjectMember(repo, who.ID, gitlab.WithContext(ctx))
	if resp != nil && resp.StatusCode == http.StatusNotFound {
		return jobs.PermissionNone, nil
	}
	if err != nil {
		return "", gitlabErr(resp, err)
	}
	switch lvl := m.AccessLevel; {
	case lvl >= gitlab.OwnerPermissions:
		return "admin", nil
	case lvl >= gitlab.MaintainerPermissions:
		return "maintain", nil
	case lvl >= gitlab.DeveloperPermissions:
		return "write", nil
	case lvl >= gitlab.PlannerPermissions:
		return "triage", nil
	case lvl >= gitlab.GuestPermissions:
		return "read", nil
	}
	return jobs.PermissionNone, nil
}

// Self implements API: the token's own user (a project access token's is
// a bot user of its project, a new one for each job).
func (g *GitLab) Self(ctx context.Context, _ token.Minter, tok token.Token) (Person, error) {
	c, err := g.client(tok)
	if err != nil {
		return Person{}, err
	}
	u, resp, err := c.Users.CurrentUser(gitlab.WithContext(ctx))
	if err != nil {
		return Person{}, gitlabErr(resp, err)
	}
	return Person{Login: u.Username, ID: u.ID}, nil
}

// ReplyToReviewComment implements API: a note added to the discussion that
// holds note r.To, found among the merge request's discussions (at most
// glPages pages).
func (g *GitLab) ReplyToReviewComment(ctx context.Context, tok token.Token, repo string, number int, r ReviewReply) error {
	c, err := g.client(tok)
	if err != nil {
		return err
	}
	discussion := ""
	for page := int64(1); page > 0 && page <= glPages && discussion == ""; {
		list, resp, err := c.Discussions.ListMergeRequestDiscussions(repo, int64(number), &gitlab.ListMergeRequestDiscussionsOptions{
			ListOptions: gitlab.ListOptions{Page: page, PerPage: glPerPage}}, gitlab.WithContext(ctx))
		if err != nil {
			return gitlabErr(resp, err)
		}
		for _, d := range list {
			for _, n := range d.Notes {
				if n.ID == r.To {
					discussion = d.ID
				}
			}
		}
		page = resp.NextPage
	}
	if discussion == "" {
		return fmt.Errorf("no discussion of the merge request holds note %d", r.To)
	}
	_, resp, err := c.Discussions.AddMergeRequestDiscussionNote(repo, int64(number), discussion,
		&gitlab.AddMergeRequestDiscussionNoteOptions{Body: gitlab.Ptr(r.Body)}, gitlab.WithContext(ctx))
	if err != nil {
		return gitlabErr(resp, err)
	}
	return nil
}

// CreateReview implements API: GitLab has no review to hold comments, so
// the review's text is a note and each comment a discussion on the merge
// request's diff, positioned on the new side of its line against the merge
// request's diff refs.
func (g *GitLab) CreateReview(ctx context.Context, tok token.Token, repo string, number int, rv NewReview) error {
	c, err := g.client(tok)
	if err != nil {
		return err
	}
	mr, resp, err := c.MergeRequests.GetMergeRequest(repo, int64(number), nil, gitlab.WithContext(ctx))
	if err != nil {
		return gitlabErr(resp, err)
	}
	if rv.Body != "" {
		if _, resp, err := c.Notes.CreateMergeRequestNote(repo, int64(number), &gitlab.CreateMergeRequestNoteOptions{Body: gitlab.Ptr(rv.Body)},
			gitlab.WithContext(ctx)); err != nil {
			return gitlabErr(resp, err)
		}
	}
	refs := mr.DiffRefs
	if refs.HeadSha == "" {
		refs.HeadSha = rv.Commit
	}
	for _, cm := range rv.Comments {
		pos := &gitlab.PositionOptions{BaseSHA: gitlab.Ptr(refs.BaseSha), StartSHA: gitlab.Ptr(refs.StartSha), HeadSHA: gitlab.Ptr(refs.HeadSha),
			PositionType: gitlab.Ptr("text"), NewPath: gitlab.Ptr(cm.Path), OldPath: gitlab.Ptr(cm.Path), NewLine: gitlab.Ptr(int64(cm.Line))}
		if _, resp, err := c.Discussions.CreateMergeRequestDiscussion(repo, int64(number), &gitlab.CreateMergeRequestDiscussionOptions{
			Body: gitlab.Ptr(cm.Body), Position: pos}, gitlab.WithContext(ctx)); err != nil {
			return gitlabErr(resp, err)
		}
	}
	return nil
}

// EditLabels implements API: one update of the issue or the merge request.
func (g *GitLab) EditLabels(ctx context.Context, tok token.Token, repo string, number int, pullRequest bool, add, remove []string) error {
	if len(add) == 0 && len(remove) == 0 {
		return nil
	}
	c, err := g.client(tok)
	if err != nil {
		return err
	}
	var addOpt, removeOpt *gitlab.LabelOptions
	if len(add) > 0 {
		addOpt = gitlab.Ptr(gitlab.LabelOptions(add))
	}
	if len(remove) > 0 {
		removeOpt = gitlab.Ptr(gitlab.LabelOptions(remove))
	}
	var resp *gitlab.Response
	if pullRequest {
		_, resp, err = c.MergeRequests.UpdateMergeRequest(repo, int64(number), &gitlab.UpdateMergeRequestOptions{
			AddLabels: addOpt, RemoveLabels: removeOpt}, gitlab.WithContext(ctx))
	} else {
		_, resp, err = c.Issues.UpdateIssue(repo, int64(number), &gitlab.UpdateIssueOptions{
			AddLabels: addOpt, RemoveLabels: removeOpt}, gitlab.WithContext(ctx))
	}
	if err != nil {
		return gitlabErr(resp, err)
	}
	return nil
}

// gitlabProtects follows GitLab's own rule for a protected branch name
// (Gitlab::RefMatcher), not a shell glob: a name without * protects that one
// branch; with *, the whole branch name must match, each * standing for any
// run of characters, / included, so "pi/*" protects pi/issue/3 and "*" every
// branch. No other character is special.
func gitlabProtects(rule, branch string) bool {
	if rule == "" {
		return false
	}
	parts := strings.Split(rule, "*")
	if len(parts) == 1 {
		return rule == branch
	}
	first, last := parts[0], parts[len(parts)-1]
	if len(branch) < len(first)+len(last) || !strings.HasPrefix(branch, first) || !strings.HasSuffix(branch, last) {
		return false
	}
	// Each middle part at its earliest place leaves the most room for the
	// rest: a greedy scan decides the match.
	rest := branch[len(first) : len(branch)-len(last)]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(rest, p)
		if i < 0 {
			return false
		}
		rest = rest[i+len(p):]
	}
	return true
}
