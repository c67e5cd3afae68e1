package workspace

import (
	"context"
	"time"

	"github.com/pidispatch/pidispatch/forge/token"
	"github.com/pidispatch/pidispatch/jobs"
)

// API is what the host asks of a forge's REST API for one job, with the job's
// token. Errors wrap token.ErrRefused, token.ErrNoRepository or
// token.ErrUnavailable where the forge's answer says which.
//
// The reading methods (Issue to Permission) build the job's event: they
// answer the forge's text as it is, and the caller clips it (jobs.Clip)
// before anyone sees it.
type API interface {
	// Repository answers the id, clone URL and default branch of repo.
	Repository(ctx context.Context, tok token.Token, repo string) (Repository, error)
	// PullRequest answers where pull (merge) request number's head is.
	PullRequest(ctx context.Context, tok token.Token, repo string, number int) (PullHead, error)
	// BranchProtected reports whether branch exists and is protected.
	BranchProtected(ctx context.Context, tok token.Token, repo, branch string) (bool, error)
	// FindPullRequest answers the URL of the open pull request from head
	// ("" when there is none).
	FindPullRequest(ctx context.Context, tok token.Token, repo, head string) (string, error)
	// OpenPullRequest opens a pull request and answers its URL.
	OpenPullRequest(ctx context.Context, tok token.Token, repo string, pr NewPullRequest) (string, error)
	// Comment writes a comment on issue or pull request number and answers
	// its id.
	Comment(ctx context.Context, tok token.Token, repo string, number int, pullRequest bool, body string) (int64, error)
	// EditComment replaces the text of comment id on issue or pull request
	// number (the job's status comment). A comment that is gone, or not
	// the host's to edit, wraps token.ErrNoRepository or token.ErrRefused.
	EditComment(ctx context.Context, tok token.Token, repo string, number int, pullRequest bool, id int64, body string) error
	// GitUser is the user name git sends with the token (basic auth).
	GitUser() string
	// ForgeURL is the forge's own web root as the host configured it: a
	// clone URL the forge answers must be on its scheme, host and port
	// (forge.CheckCloneURL), so an answer cannot send git, and the token
	// with it, elsewhere.
	ForgeURL() string
	// Self answers who the host is on the forge: the user tok acts as (for
	// a GitHub App, the App's bot, found with minter's JWT). A pull request
	// this user opened from a pi/ branch is the project's own.
	Self(ctx context.Context, minter token.Minter, tok token.Token) (Person, error)

	// The writing methods post a job's outputs (comment.md goes through
	// Comment), each already validated by forge/output.

	// ReplyToReviewComment answers inline review comment reply.To of pull
	// request number in its own thread.
	ReplyToReviewComment(ctx context.Context, tok token.Token, repo string, number int, reply ReviewReply) error
	// CreateReview posts a review's text and its inline comments on pull
	// request number's diff at review.Commit: one review where the forge
	// has reviews (GitHub, Gitea); on a merge request (GitLab), the text
	// as a note and each comment as a discussion on the diff. It never
	// approves nor asks for changes.
	CreateReview(ctx context.Context, tok token.Token, repo string, number int, review NewReview) error
	// EditLabels adds and removes labels of issue or pull request number;
	// removing a label it does not carry is no error.
	EditLabels(ctx context.Context, tok token.Token, repo string, number int, pullRequest bool, add, remove []string) error

	// Issue answers issue or pull request number: for a pull request, its
	// conversation (title, description, labels).
	Issue(ctx context.Context, tok token.Token, repo string, number int, pullRequest bool) (Issue, error)
	// ChangedFiles answers the first limit files pull request number
	// changes and how many it changes in all.
	ChangedFiles(ctx context.Context, tok token.Token, repo string, number, limit int) ([]jobs.EventFile, int, error)
	// GetComment answers comment id of issue or pull request number.
	GetComment(ctx context.Context, tok token.Token, repo string, number int, pullRequest bool, id int64) (IssueComment, error)
	// LastComments answers the last n comments of the thread of number,
	// oldest first, and how many comments the thread has in all (the forge's
	// own notes of events, such as a label added, are not comments).
	LastComments(ctx context.Context, tok token.Token, repo string, number int, pullRequest bool, n int) ([]IssueComment, int, error)
	// Review answers review id of pull request number with at most maxNotes
	// of its inline comments; nil when the forge has no reviews (GitLab).
	Review(ctx context.Context, tok token.Token, repo string, number int, id int64, maxNotes int) (*Review, error)
	// LabelAddedBy answers who last added label to number; a zero Person
	// when the forge does not say.
	LabelAddedBy(ctx context.Context, tok token.Token, repo string, number int, pullRequest bool, label string) (Person, error)
	// Permission answers who's permission on repo in jobs.EventPerson's
	// words: admin, maintain, write, triage, read or none.
	Permission(ctx context.Context, tok token.Token, repo string, who Person) (string, error)
}

// Repository is the forge's answer for a repository.
type Repository struct {
	// ID is the forge's numeric id of the repository (GitLab: the project
	// id), which no rename or transfer changes.
	ID int64
	// CloneURL is the HTTP(S) URL git clones and pushes over.
	CloneURL      string
	DefaultBranch string
	// WebURL is the repository's page, for the job's event.
	WebURL string
}

// PullHead is where a pull request's head is.
type PullHead struct {
	// Ref is the ref the forge publishes the head under in the base
	// repository (refs/pull/N/head, refs/merge-requests/N/head).
	Ref string
	// SHA is the head commit.
	SHA string
	// Branch is the head branch when it lives in the same repository, else "".
	Branch string
	// Base is the branch the pull request targets.
	Base string
	// Head is the head branch's name, in whichever repository it lives.
	Head string
	// Author opened the pull request; AuthorBot says the forge calls them
	// a bot (GitLab: a bot user of this very project, as a project access
	// token's is).
	Author    Person
	AuthorBot bool
	// Body is the pull request's description as the forge holds it.
	Body string
}

// ReviewReply is a reply to an inline review comment: To is its id, Path
// and Line where it sits (a forge without replies gets a comment there).
type ReviewReply struct {
	To   int64
	Path string
	Line int
	Body string
}

// NewReview is a review's own text and its inline comments on a pull
// request's diff at Commit, the head they were written against.
type NewReview struct {
	Commit   string
	Body     string
	Comments []InlineComment
}

// InlineComment is a comment on new-side line Line of Path.
type InlineComment struct {
	Path string
	Line int
	Body string
}

// NewPullRequest is a pull request to open.
type NewPullRequest struct {
	Title, Body string
	Head, Base  string
	Draft       bool
}

// Person is someone on the forge as an answer names them: their login, and
// the forge's numeric id when it gave one (GitLab's permission lookup needs
// it).
type Person struct {
	Login string
	ID    int64
}

// Issue is an issue or a pull request's conversation, as the forge wrote it.
type Issue struct {
	Number                  int
	Title, Body, State, URL string
	Author                  Person
	Labels                  []string
}

// IssueComment is one comment of a thread.
type IssueComment struct {
	ID      int64
	Author  Person
	Body    string
	Created time.Time
}

// Review is a submitted review of a pull request.
type Review struct {
	ID     int64
	State  string
	Author Person
	Body   string
	Notes  []ReviewNote
}

// ReviewNote is one inline comment of a review.
type ReviewNote struct {
	ID     int64
	Path   string
	Line   int
	Author Person
	Body   string
}
