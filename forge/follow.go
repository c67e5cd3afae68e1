package forge

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/pidispatch/pidispatch/jobs"
)

// OwnBranchPrefix starts every branch the project publishes to (pi/issue-<n>,
// pi/pr-<n>, pi/<job id>): a pull request from any other branch is not the
// project's.
const OwnBranchPrefix = "pi/"

// OwnFooterMarker starts the host's footer of every pull request it opens:
// on GitLab, where each job's token is a bot user of its own, it is how the
// project's merge requests are told apart.
const OwnFooterMarker = "Proposed by pidispatch job `"

// PullChange is what a pull request event changed that the receiver follows.
type PullChange string

// The changes followed; "" is any other action.
const (
	PullMerged   PullChange = "merged"   // closed by merging
	PullClosed   PullChange = "closed"   // closed without merge
	PullReopened PullChange = "reopened" // open again
	PullPushed   PullChange = "pushed"   // new commits on its branch
)

func pullClosedOrMerged(merged bool) PullChange {
	if merged {
		return PullMerged
	}
	return PullClosed
}

// PullFacts is what a pull (merge) request event says of the pull request
// itself: enough to tell the project's own, and what became of it.
type PullFacts struct {
	// URL is its web page as the forge names it (GitHub's and Gitea's
	// html_url, GitLab's object_attributes.url): the URL the forge's API
	// answers when the project opens it, so the run record's pullRequestUrl.
	URL string
	// HeadBranch is its source branch; SameRepo says the branch lives in
	// the repository itself (not a fork).
	HeadBranch string
	SameRepo   bool
	// AuthorID and AuthorLogin name who opened it (GitLab: the id only).
	AuthorID    int64
	AuthorLogin string
	// Footer: its description carries the host's footer (GitLab only).
	Footer bool
	// Change is what the event changed ("" for an action not followed).
	Change PullChange
	// UpdatedAt is the forge's time of the change (zero: the payload gave
	// none that reads).
	UpdatedAt time.Time
}

// PullRequestRecorder keeps what became of the project's pull requests: a
// *fleetstate.PullRequests. Record folds one observation into the pull
// request's outcome (merged is final, the later state wins, HumanCommits
// adds up).
type PullRequestRecorder interface {
	Record(ctx context.Context, url string, o jobs.PullRequestOutcome) error
}

// OwnPullRequest reports whether the event's pull request is one the project
// opened, by the same rule the workspace applies before it pushes to one: a
// branch of the repository itself named pi/..., opened by the service's own
// user (self, 0 when unknown); on GitLab, where each job's token is a bot
// user of its own, a merge request whose description carries the host's
// footer.
func OwnPullRequest(f jobs.Forge, p *PullFacts, self int64) bool {
	switch {
	case p == nil, !p.SameRepo, !strings.HasPrefix(p.HeadBranch, OwnBranchPrefix):
		return false
	case f == jobs.ForgeGitLab:
		return p.Footer
	}
	return self != 0 && p.AuthorID == self
}

// follow records the outcome of the project's own pull request the event
// changed: closed (merged or not), reopened, or given commits by someone
// other than the service. It runs only for a repository a trigger serves,
// after the event was matched, and never enqueues. An event about any other
// pull request records nothing.
func (in *Intake) follow(ctx context.Context, ev Event) error {
	p := ev.Pull
	if in.cfg.PullRequests == nil || p == nil || p.Change == "" || !ev.PullRequest {
		return nil
	}
	if len(servedBy(*in.triggers.Load(), ev)) == 0 {
		return nil
	}
	if ev.CloneURL != "" && CheckCloneURL(ev.CloneURL, in.forgeURL(ev.Forge)) != nil {
		return nil
	}
	attrs := []any{"forge", ev.Forge, "delivery", ev.DeliveryID, "repo", ev.Repo, "number", ev.Number, "change", string(p.Change)}
	if !OwnPullRequest(ev.Forge, p, in.cfg.SelfIDs[ev.Forge]) {
		in.log.Debug("forge_pull_request_not_own", attrs...)
		return nil
	}
	o := jobs.PullRequestOutcome{State: jobs.PullRequestOpen, UpdatedAt: p.UpdatedAt}
	switch p.Change {
	case PullMerged:
		o.State = jobs.PullRequestMerged
	case PullClosed:
		o.State = jobs.PullRequestClosed
	case PullPushed:
		if in.isSelf(ev) {
			return nil // the project's own push: no one else's work
		}
		o.HumanCommits = 1
	}
	if o.UpdatedAt.IsZero() {
		o.UpdatedAt = in.cfg.Now().UTC()
	}
	if err := in.cfg.PullRequests.Record(ctx, p.URL, o); err != nil {
		in.log.Error("forge_pull_request_record_failed", append(attrs, "err", err.Error())...)
		return fmt.Errorf("pull request outcome: %w", err)
	}
	in.log.Info("forge_pull_request_followed", append(attrs, "url", p.URL, "state", o.State, "humanCommits", o.HumanCommits)...)
	return nil
}

// isSelf reports whether the event's sender is the service itself: its own
// user, or on GitLab a project or group token's bot user.
func (in *Intake) isSelf(ev Event) bool {
	if self, ok := in.cfg.SelfIDs[ev.Forge]; ok && self == ev.SenderID {
		return true
	}
	return ev.Forge == jobs.ForgeGitLab && gitlabTokenBot.MatchString(ev.SenderLogin)
}
