// Package forge turns verified forge events (GitHub, GitLab, Forgejo/Gitea)
// into jobs: it reads each forge's webhook payloads with that forge's own Go
// library, matches them against the forge triggers of triggers.json, checks
// that the person behind the event may spend (write permission, or triage for
// labels, asked of the forge), and enqueues through enqueue.Router.
//
// Package forge/receiver serves the webhooks; package forge/poller polls
// GitHub for hosts that cannot receive them. Both hand events to an [Intake].
package forge

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"code.gitea.io/sdk/gitea"
	"github.com/google/go-github/v84/github"
	gitlab "gitlab.com/gitlab-org/api/client-go/v2"

	"github.com/pidispatch/pidispatch/internal/check"
	"github.com/pidispatch/pidispatch/jobs"
)

// What an event is, once read.
const (
	KindLabel       = "label"        // a label added to an issue (or a pull request, as KindPullRequest)
	KindComment     = "comment"      // a new comment on an issue or pull request
	KindPullRequest = "pull_request" // a pull (merge) request action, a review included
	KindClose       = "close"        // an issue or pull request closed
)

// Event is a forge delivery reduced to what trigger matching and the
// permission check need. It carries no title or body beyond the comment text
// a phrase is matched in, and that never reaches a log or a job.
type Event struct {
	Forge      jobs.Forge
	DeliveryID string
	// Kind is one of the Kind constants; "" for an event no trigger type
	// handles (it is dropped as unhandled-event).
	Kind string
	// Action is the forge's own word ("labeled", "label_updated", "open",
	// "review_submitted").
	Action string
	// Repo is owner/name (GitLab: the full project path).
	Repo string
	// ProjectID is GitLab's numeric project id, which its API calls use.
	ProjectID int64
	// RepoID is the forge's numeric id of the repository (GitLab: the
	// project id; 0 when the source names none). The job carries it: a name
	// can be taken by another repository before the job runs, the id cannot.
	RepoID int64
	// Number is the issue or pull request number (GitLab: the iid).
	Number      int
	PullRequest bool
	// SenderID and SenderLogin name who acted; the login is used only to ask
	// the forge for a permission, never logged or enqueued.
	SenderID    int64
	SenderLogin string
	// Labels are the labels on the issue or pull request after the event;
	// Added are the labels the event added (GitHub: the one label; GitLab:
	// the difference; Forgejo: the whole set, its payload names no diff).
	Labels []string
	Added  []string
	// Comment is the new comment's text (comments only).
	Comment string
	// CommentID and ReviewID are the forge's ids of the comment or review
	// the event is about (0: none). The job carries the ids, never the text:
	// the host reads the text from the forge when it builds the job's event.
	CommentID int64
	ReviewID  int64
	// ReviewState is a submitted review's state, lower case.
	ReviewState string
	// CloneURL is the repository's HTTP(S) clone URL as the payload names
	// it ("" when it names none). Nothing clones from it: the workspace asks
	// the forge's API. It is checked (CheckCloneURL) because a payload whose
	// clone URL is not the forge's own was not written by that forge.
	CloneURL string
	// Pull is what a pull (merge) request event says of the pull request
	// itself, for following the project's own (nil on other events).
	Pull *PullFacts
}

// ErrMalformed marks a payload that does not parse as its declared event.
var ErrMalformed = errors.New("malformed payload")

func malformed(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrMalformed, fmt.Sprintf(format, args...))
}

// ParseGitHub reads a GitHub delivery (the X-GitHub-Event header's value and
// the verified body) with go-github. An event type no trigger handles comes
// back with an empty Kind and no error.
func ParseGitHub(eventType, deliveryID string, body []byte) (Event, error) {
	ev := Event{Forge: jobs.ForgeGitHub, DeliveryID: deliveryID}
	payload, err := readPayload(eventType, githubEvents, body, github.ParseWebHook)
	if err != nil {
		return ev, err
	}
	if err := githubComplete(payload); err != nil {
		return ev, err
	}
	switch p := payload.(type) {
	case *github.IssuesEvent:
		githubIssues(&ev, p)
	case *github.IssueCommentEvent:
		githubOnIssue(&ev, p.GetRepo(), p.GetSender(), p.GetIssue(), p.GetAction())
		if ev.Action == "created" {
			ev.Kind, ev.Comment, ev.CommentID = KindComment, p.GetComment().GetBody(), p.GetComment().GetID()
		}
	case *github.PullRequestEvent:
		githubOnPull(&ev, p.GetRepo(), p.GetSender(), p.GetPullRequest(), p.GetAction())
		if ev.Action == "labeled" {
			ev.Added = []string{p.GetLabel().GetName()}
		}
		ev.Kind = KindPullRequest
		ev.Pull = githubPullFacts(p)
	case *github.PullRequestReviewEvent:
		githubOnPull(&ev, p.GetRepo(), p.GetSender(), p.GetPullRequest(), "review_"+p.GetAction())
		if p.GetAction() == "submitted" {
			ev.Kind, ev.ReviewState = KindPullRequest, strings.ToLower(p.GetReview().GetState())
			ev.ReviewID = p.GetReview().GetID()
		}
	}
	ev.CloneURL, ev.RepoID = githubRepo(payload).GetCloneURL(), githubRepo(payload).GetID()
	return ev, ev.Validate()
}

// githubRepo is the repository a handled payload names (nil for none).
func githubRepo(payload any) *github.Repository {
	switch p := payload.(type) {
	case *github.IssuesEvent:
		return p.Repo
	case *github.IssueCommentEvent:
		return p.Repo
	case *github.PullRequestEvent:
		return p.Repo
	case *github.PullRequestReviewEvent:
		return p.Repo
	}
	return nil
}

// githubComplete refuses a handled payload without the issue or pull
// request it is about: the readers below dereference them.
func githubComplete(payload any) error {
	missing := false
	switch p := payload.(type) {
	case *github.IssuesEvent:
		missing = p.Issue == nil
	case *github.IssueCommentEvent:
		missing = p.Issue == nil
	case *github.PullRequestEvent:
		missing = p.PullRequest == nil
	case *github.PullRequestReviewEvent:
		missing = p.PullRequest == nil
	}
	if missing {
		return malformed("no issue or pull request in the payload")
	}
	return nil
}

// githubEvents are the GitHub event types a trigger handles: only they are parsed.
var githubEvents = []string{"issues", "issue_comment", "pull_request", "pull_request_review"}

// gitlabEvents are the GitLab event types a trigger handles: only they are parsed.
var gitlabEvents = []gitlab.EventType{gitlab.EventTypeIssue, gitlab.EventTypeMergeRequest, gitlab.EventTypeNote}

// readPayload parses a handled event type with the forge's library; any other need only be JSON, and is no payload.
func readPayload[T ~string](eventType string, handled []T, body []byte, parse func(T, []byte) (any, error)) (any, error) {
	if !slices.Contains(handled, T(eventType)) {
		if !json.Valid(body) {
			return nil, malformed("not JSON")
		}
		return nil, nil
	}
	payload, err := parse(T(eventType), body)
	if err != nil {
		return nil, malformed("%s: %v", eventType, err)
	}
	return payload, nil
}

// githubIssues reads an issues event: a label added, an issue opened with its labels, or one closed.
func githubIssues(ev *Event, p *github.IssuesEvent) {
	githubOnIssue(ev, p.GetRepo(), p.GetSender(), p.GetIssue(), p.GetAction())
	switch ev.Action {
	case "labeled":
		ev.Kind, ev.Added = KindLabel, []string{p.GetLabel().GetName()}
	case "opened", "reopened":
		ev.Kind, ev.Added = KindLabel, ev.Labels
	case "closed":
		ev.Kind = KindClose
	}
}

// githubOnIssue reads what every issue and issue comment event carries: who acted, where, on what.
func githubOnIssue(ev *Event, repo *github.Repository, sender *github.User, is *github.Issue, action string) {
	ev.Action, ev.Repo = action, repo.GetFullName()
	ev.SenderID, ev.SenderLogin = sender.GetID(), sender.GetLogin()
	ev.Number, ev.Labels = is.GetNumber(), githubLabels(is.Labels)
	ev.PullRequest = is.IsPullRequest()
}

// githubOnPull reads what every pull request and review event carries: who acted, where, on what.
func githubOnPull(ev *Event, repo *github.Repository, sender *github.User, pr *github.PullRequest, action string) {
	ev.Action, ev.Repo = action, repo.GetFullName()
	ev.SenderID, ev.SenderLogin = sender.GetID(), sender.GetLogin()
	ev.Number, ev.PullRequest = pr.GetNumber(), true
	ev.Labels = githubLabels(pr.Labels)
}

// githubPullFacts reads a pull request event's pull request: closed
// (merged or not), reopened, or given new commits (synchronize).
func githubPullFacts(p *github.PullRequestEvent) *PullFacts {
	pr := p.GetPullRequest()
	f := &PullFacts{
		URL: pr.GetHTMLURL(), HeadBranch: pr.GetHead().GetRef(),
		SameRepo:    pr.GetHead().GetRepo().GetID() != 0 && pr.GetHead().GetRepo().GetID() == pr.GetBase().GetRepo().GetID(),
		AuthorID:    pr.GetUser().GetID(),
		AuthorLogin: pr.GetUser().GetLogin(),
		UpdatedAt:   pr.GetUpdatedAt().Time,
	}
	switch p.GetAction() {
	case "closed":
		f.Change = pullClosedOrMerged(pr.GetMerged())
	case "reopened":
		f.Change = PullReopened
	case "synchronize":
		f.Change = PullPushed
	}
	return f
}

// githubLabels are the labels' names, which triggers name.
func githubLabels(ls []*github.Label) []string {
	out := make([]string, 0, len(ls))
	for _, l := range ls {
		out = append(out, l.GetName())
	}
	return out
}

// ParseGitLab reads a GitLab delivery (the X-Gitlab-Event header's value and
// the verified body) with GitLab's client library.
func ParseGitLab(eventType, deliveryID string, body []byte) (Event, error) {
	ev := Event{Forge: jobs.ForgeGitLab, DeliveryID: deliveryID}
	payload, err := readPayload(eventType, gitlabEvents, body, gitlab.ParseWebhook)
	if err != nil {
		return ev, err
	}
	switch p := payload.(type) {
	case *gitlab.IssueEvent:
		gitlabIssue(&ev, p)
	case *gitlab.MergeEvent:
		gitlabSender(&ev, p.User)
		ev.Repo, ev.ProjectID = p.Project.PathWithNamespace, p.Project.ID
		ev.Number, ev.Action, ev.PullRequest = int(p.ObjectAttributes.IID), p.ObjectAttributes.Action, true
		ev.Labels, ev.Added = gitlabLabels(p.Labels), gitlabAdded(p.Changes.Labels)
		ev.Kind, ev.CloneURL = KindPullRequest, p.Project.GitHTTPURL
		ev.Pull = gitlabPullFacts(p)
	case *gitlab.IssueCommentEvent:
		gitlabIssueComment(&ev, p)
	case *gitlab.MergeCommentEvent:
		gitlabSender(&ev, p.User)
		ev.Repo, ev.ProjectID = p.Project.PathWithNamespace, p.ProjectID
		ev.Number, ev.Action, ev.PullRequest = int(p.MergeRequest.IID), "note", true
		ev.Kind, ev.Comment, ev.CommentID = KindComment, p.ObjectAttributes.Note, int64(p.ObjectAttributes.ID)
		ev.CloneURL = p.Project.GitHTTPURL
	}
	ev.RepoID = ev.ProjectID
	return ev, ev.Validate()
}

// gitlabPullFacts reads a merge request event's merge request: closed,
// merged, reopened, or given new commits (update with oldrev).
func gitlabPullFacts(p *gitlab.MergeEvent) *PullFacts {
	a := p.ObjectAttributes
	f := &PullFacts{
		URL: a.URL, HeadBranch: a.SourceBranch,
		SameRepo:  a.SourceProjectID != 0 && a.SourceProjectID == a.TargetProjectID,
		AuthorID:  a.AuthorID,
		Footer:    strings.Contains(a.Description, OwnFooterMarker),
		UpdatedAt: gitlabTime(a.UpdatedAt),
	}
	switch {
	case a.Action == "close":
		f.Change = PullClosed
	case a.Action == "merge":
		f.Change = PullMerged
	case a.Action == "reopen":
		f.Change = PullReopened
	case a.Action == "update" && a.OldRev != "":
		f.Change = PullPushed
	}
	return f
}

// gitlabTime reads the times GitLab's webhooks write, in either of its two
// forms; zero when neither parses.
func gitlabTime(s string) time.Time {
	for _, layout := range []string{time.RFC3339, "2006-01-02 15:04:05 MST", "2006-01-02 15:04:05 -0700"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t
		}
	}
	return time.Time{}
}

// gitlabIssue reads an issue event: one closed, opened with its labels, or given new labels.
func gitlabIssue(ev *Event, p *gitlab.IssueEvent) {
	gitlabSender(ev, p.User)
	ev.Repo, ev.ProjectID = p.Project.PathWithNamespace, p.Project.ID
	ev.Number, ev.Action = int(p.ObjectAttributes.IID), p.ObjectAttributes.Action
	ev.Labels, ev.CloneURL = gitlabLabels(p.Labels), p.Project.GitHTTPURL
	switch ev.Action {
	case "close":
		ev.Kind = KindClose
	case "open":
		ev.Kind, ev.Added = KindLabel, ev.Labels
	default:
		if a := gitlabAdded(p.Changes.Labels); len(a) > 0 {
			ev.Kind, ev.Added = KindLabel, a
		}
	}
}

// gitlabIssueComment reads a note on an issue, whose author is a full user rather than an event user.
func gitlabIssueComment(ev *Event, p *gitlab.IssueCommentEvent) {
	if p.User != nil {
		ev.SenderID, ev.SenderLogin = p.User.ID, p.User.Username
	}
	ev.Repo, ev.ProjectID = p.Project.PathWithNamespace, p.ProjectID
	ev.Number, ev.Action = int(p.Issue.IID), "note"
	ev.Kind, ev.Comment, ev.CommentID = KindComment, p.ObjectAttributes.Note, int64(p.ObjectAttributes.ID)
	ev.CloneURL = p.Project.GitHTTPURL
	for _, l := range p.Issue.Labels {
		ev.Labels = append(ev.Labels, l.Title)
	}
}

// gitlabSender reads who acted, when the payload names anyone: the permission check asks about them.
func gitlabSender(ev *Event, u *gitlab.EventUser) {
	if u != nil {
		ev.SenderID, ev.SenderLogin = u.ID, u.Username
	}
}

// gitlabLabels are the labels' titles, which triggers name.
func gitlabLabels(ls []*gitlab.EventLabel) []string {
	out := make([]string, 0, len(ls))
	for _, l := range ls {
		if l != nil {
			out = append(out, l.Title)
		}
	}
	return out
}

// gitlabAdded are the labels a change added: GitLab's payload gives the sets before and after.
func gitlabAdded(ch gitlab.EventChangesLabels) []string {
	prev := gitlabLabels(ch.Previous)
	var out []string
	for _, t := range gitlabLabels(ch.Current) {
		if !contains(prev, t) {
			out = append(out, t)
		}
	}
	return out
}

// forgejoPayload is the part of a Forgejo/Gitea issues, issue_comment or
// pull_request payload the intake reads, in the Gitea SDK's types.
type forgejoPayload struct {
	Action      string             `json:"action"`
	Number      int64              `json:"number"`
	Issue       *gitea.Issue       `json:"issue"`
	PullRequest *gitea.PullRequest `json:"pull_request"`
	Comment     *gitea.Comment     `json:"comment"`
	Repository  *gitea.Repository  `json:"repository"`
	Sender      *gitea.User        `json:"sender"`
	IsPull      bool               `json:"is_pull"`
	Label       *gitea.Label       `json:"label"`
}

// ParseForgejo reads a Forgejo or Gitea delivery (the X-Forgejo-Event or
// X-Gitea-Event header's value and the verified body).
func ParseForgejo(eventType, deliveryID string, body []byte) (Event, error) {
	ev := Event{Forge: jobs.ForgeForgejo, DeliveryID: deliveryID}
	var p forgejoPayload
	if err := json.Unmarshal(body, &p); err != nil {
		return ev, malformed("%s: %v", eventType, err)
	}
	switch eventType {
	case "issues", "issue_comment", "issue_label", "pull_request", "pull_request_label":
	default:
		return ev, nil
	}
	if p.Repository == nil || p.Sender == nil {
		return ev, malformed("%s: no repository or sender", eventType)
	}
	ev.Action, ev.Repo, ev.CloneURL = p.Action, p.Repository.FullName, p.Repository.CloneURL
	ev.RepoID = p.Repository.ID
	ev.SenderID, ev.SenderLogin = p.Sender.ID, p.Sender.UserName
	labels := func(ls []*gitea.Label) []string {
		out := make([]string, 0, len(ls))
		for _, l := range ls {
			out = append(out, l.Name)
		}
		return out
	}
	switch {
	case p.PullRequest != nil:
		ev.Number, ev.PullRequest, ev.Labels = int(p.PullRequest.Index), true, labels(p.PullRequest.Labels)
	case p.Issue != nil:
		ev.Number, ev.Labels = int(p.Issue.Index), labels(p.Issue.Labels)
		ev.PullRequest = p.IsPull || p.Issue.PullRequest != nil
	default:
		return ev, malformed("%s: no issue or pull_request", eventType)
	}
	switch eventType {
	case "issues", "issue_label":
		switch ev.Action {
		case "opened", "reopened", "label_updated":
			ev.Kind, ev.Added = KindLabel, ev.Labels
		case "closed":
			ev.Kind = KindClose
		}
	case "issue_comment":
		if ev.Action == "created" && p.Comment != nil {
			ev.Kind, ev.Comment, ev.CommentID = KindComment, p.Comment.Body, p.Comment.ID
		}
	case "pull_request", "pull_request_label":
		ev.Kind = KindPullRequest
		if ev.Action == "label_updated" {
			ev.Added = ev.Labels
		}
		if p.PullRequest != nil {
			ev.Pull = forgejoPullFacts(p.Action, p.PullRequest)
		}
	}
	return ev, ev.Validate()
}

// forgejoPullFacts reads a Forgejo/Gitea pull request event's pull request:
// closed (merged or not), reopened, or given new commits (synchronized).
func forgejoPullFacts(action string, pr *gitea.PullRequest) *PullFacts {
	f := &PullFacts{URL: pr.HTMLURL}
	if pr.Head != nil && pr.Base != nil {
		f.HeadBranch = pr.Head.Ref
		f.SameRepo = pr.Head.RepoID != 0 && pr.Head.RepoID == pr.Base.RepoID
	}
	if pr.Poster != nil {
		f.AuthorID, f.AuthorLogin = pr.Poster.ID, pr.Poster.UserName
	}
	if pr.Updated != nil {
		f.UpdatedAt = *pr.Updated
	}
	switch action {
	case "closed":
		f.Change = pullClosedOrMerged(pr.HasMerged)
	case "reopened":
		f.Change = PullReopened
	case "synchronized":
		f.Change = PullPushed
	}
	return f
}

// Validate checks an event a trigger may handle (an empty Kind is no such
// event and always valid) against what its job will carry, so an event
// either is refused here as malformed or makes a valid job: a repository of
// the job's syntax, a sender, a number within the job's bounds, a delivery id
// of the receiver's alphabet, and a clone URL, when the payload names one,
// that is http(s) without credentials (CheckCloneURL).
func (ev Event) Validate() error {
	if ev.Kind == "" {
		return nil
	}
	switch {
	case ev.Repo == "":
		return malformed("no repository")
	case !check.Repo(ev.Repo):
		return malformed("repository %q is not owner/name of [A-Za-z0-9._-] segments", clip(ev.Repo))
	case ev.SenderID <= 0:
		return malformed("no sender id")
	case ev.Number <= 0 || ev.Number > jobs.MaxForgeNumber:
		return malformed("no issue or pull request number")
	case !validDelivery(ev.DeliveryID):
		return malformed("delivery id %q is not 1-%d bytes of [A-Za-z0-9._-]", clip(ev.DeliveryID), maxDeliveryBytes)
	case ev.CommentID < 0 || ev.ReviewID < 0:
		return malformed("a negative comment or review id")
	case ev.RepoID < 0 || ev.RepoID > jobs.MaxRepoID:
		return malformed("repository id %d is not between 0 and %d", ev.RepoID, int64(jobs.MaxRepoID))
	}
	if ev.CloneURL != "" {
		return CheckCloneURL(ev.CloneURL, "")
	}
	return nil
}

// maxDeliveryBytes bounds a delivery id: the receiver's bound, within the job's.
const maxDeliveryBytes = 100

// validDelivery: the delivery id becomes part of a job id, so its alphabet is
// the receiver's (a GUID, a UUID, a number), narrower than a job's.
func validDelivery(s string) bool {
	if s == "" || len(s) > maxDeliveryBytes {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// clip cuts a payload's value for an error message.
func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

// ErrCloneURL marks a clone URL that is not the forge's own https (or, for a
// forge configured on http, http) URL. It is also an ErrMalformed.
var ErrCloneURL = errors.New("clone URL refused")

// CheckCloneURL checks a clone URL a payload or a forge's API names against
// forgeURL, the forge's own configured URL (its web root): https, or http
// only when forgeURL is http itself; forgeURL's host and port; no user or
// password. An empty forgeURL checks only what holds for every forge: http or
// https, a host, no credentials. ssh://, git://, file://, ext:: and
// scp-like user@host:path URLs are refused: the token git sends goes over
// HTTP(S) only, and never to another host.
func CheckCloneURL(cloneURL, forgeURL string) error {
	refuse := func(format string, args ...any) error {
		return fmt.Errorf("%w: %w: %s", ErrMalformed, ErrCloneURL, fmt.Sprintf(format, args...))
	}
	u, err := url.Parse(cloneURL)
	switch {
	case err != nil:
		return refuse("not a URL")
	case u.Scheme != "https" && u.Scheme != "http":
		return refuse("scheme %q: only https, or http on a forge configured on http", clip(u.Scheme))
	case u.User != nil:
		return refuse("it carries a user or password")
	case u.Host == "" || u.Opaque != "":
		return refuse("no host")
	}
	if forgeURL == "" {
		return nil
	}
	f, err := url.Parse(forgeURL)
	if err != nil || f.Host == "" {
		return refuse("the forge's own URL %q is not a URL", clip(forgeURL))
	}
	switch {
	case u.Scheme == "http" && f.Scheme != "http":
		return refuse("http while the forge is %s: a token sent over http is readable on the way", f.Scheme)
	case !sameHost(u, f):
		return refuse("host %q is not the forge's %q", clip(u.Host), f.Host)
	}
	return nil
}

// sameHost compares host names without case, and ports where either URL names
// one, each URL's own scheme giving its default.
func sameHost(a, b *url.URL) bool {
	port := func(u *url.URL) string {
		if p := u.Port(); p != "" {
			return p
		}
		if u.Scheme == "http" {
			return "80"
		}
		return "443"
	}
	if !strings.EqualFold(a.Hostname(), b.Hostname()) {
		return false
	}
	return a.Port() == "" && b.Port() == "" || port(a) == port(b)
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
