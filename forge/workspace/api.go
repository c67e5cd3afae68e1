package workspace

import (
	"context"

	"github.com/pidispatch/pidispatch/forge/token"
)

// API is what the host asks of a forge's REST API for one job, with the job's
// token. Errors wrap token.ErrRefused, token.ErrNoRepository or
// token.ErrUnavailable where the forge's answer says which.
type API interface {
	// Repository answers the clone URL and default branch of repo.
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
	// Comment writes a comment on issue or pull request number.
	Comment(ctx context.Context, tok token.Token, repo string, number int, pullRequest bool, body string) error
	// GitUser is the user name git sends with the token (basic auth).
	GitUser() string
}

// Repository is the forge's answer for a repository.
type Repository struct {
	// CloneURL is the HTTP(S) URL git clones and pushes over.
	CloneURL      string
	DefaultBranch string
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
}

// NewPullRequest is a pull request to open.
type NewPullRequest struct {
	Title, Body string
	Head, Base  string
	Draft       bool
}
