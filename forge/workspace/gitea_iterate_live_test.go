package workspace_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"code.gitea.io/sdk/gitea"
	"github.com/stretchr/testify/require"

	"github.com/pidispatch/pidispatch/forge/token"
	"github.com/pidispatch/pidispatch/forge/workspace"
	"github.com/pidispatch/pidispatch/jobs"
)

// giteaIterate is a real Gitea with the admin's repository, whose token is
// the host's, and alice, a collaborator who may write.
type giteaIterate struct {
	*giteaEvent
	m *workspace.Manager
}

func startGiteaIterate(t *testing.T) *giteaIterate {
	t.Helper()
	e := startGiteaEvent(t)
	for _, name := range []string{"needs-review", "approved"} {
		l, _, err := e.admin.CreateLabel(e.owner, "web", gitea.CreateLabelOption{Name: name, Color: "#00aa00"})
		require.NoError(t, err)
		e.labels[name] = l.ID
	}
	m, err := workspace.New(workspace.Config{
		Forges: map[jobs.Forge]workspace.Forge{jobs.ForgeForgejo: {
			Minter: token.Static{Token: token.New(e.g.AdminToken, time.Time{})},
			API:    &workspace.Gitea{URL: e.g.URL},
		}},
		Policy: func(jobs.Job) workspace.PublishPolicy {
			return workspace.PublishPolicy{Labels: []string{"needs-review"}}
		},
		Trigger:  hostTrigger,
		StateDir: t.TempDir(), Host: "h1", Backoff: 10 * time.Millisecond,
	})
	require.NoError(t, err)
	return &giteaIterate{giteaEvent: e, m: m}
}

// run prepares job, writes files in its workspace, runs before (when set)
// once the job ran, and publishes with res.
func (e *giteaIterate) run(t *testing.T, job workspace.Job, files map[string]string, before func(), res workspace.Result) (workspace.Published, *workspace.Checkout, error) {
	t.Helper()
	c, dir := e.prepare(t, e.m, job)
	for name, body := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(body), 0o644))
	}
	if before != nil {
		before()
	}
	pub, err := c.Publish(context.Background(), res)
	return pub, c, err
}

// pullJob is a job about pull request n.
func (e *giteaIterate) pullJob(n int64) workspace.Job {
	j := e.job(int(n))
	j.Job.PullRequest = true
	return j
}

func (e *giteaIterate) branchHead(t *testing.T, branch string) string {
	t.Helper()
	b, _, err := e.admin.GetRepoBranch(e.owner, "web", branch)
	require.NoError(t, err)
	return b.Commit.ID
}

func (e *giteaIterate) branchExists(branch string) bool {
	_, resp, err := e.admin.GetRepoBranch(e.owner, "web", branch)
	return err == nil && resp != nil && resp.StatusCode == 200
}

// pulls are the repository's pull requests from head.
func (e *giteaIterate) pulls(t *testing.T, head string) []*gitea.PullRequest {
	t.Helper()
	all, _, err := e.admin.ListRepoPullRequests(e.owner, "web", gitea.ListPullRequestsOptions{State: gitea.StateAll})
	require.NoError(t, err)
	var out []*gitea.PullRequest
	for _, pr := range all {
		if pr.Head != nil && pr.Head.Ref == head {
			out = append(out, pr)
		}
	}
	return out
}

func (e *giteaIterate) commentBodies(t *testing.T, n int64) []string {
	t.Helper()
	cs, _, err := e.admin.ListIssueComments(e.owner, "web", n, gitea.ListIssueCommentOptions{})
	require.NoError(t, err)
	var out []string
	for _, c := range cs {
		out = append(out, c.Body)
	}
	return out
}

// push commits file on branch as alice would, through the API, and returns
// the branch's new head.
func (e *giteaIterate) push(t *testing.T, by *gitea.Client, branch, newBranch, file, body string) string {
	t.Helper()
	_, _, err := by.CreateFile(e.owner, "web", file, gitea.CreateFileOptions{
		FileOptions: gitea.FileOptions{Message: "a person's change", BranchName: branch, NewBranchName: newBranch},
		Content:     base64.StdEncoding.EncodeToString([]byte(body)),
	})
	require.NoError(t, err)
	if newBranch != "" {
		branch = newBranch
	}
	return e.branchHead(t, branch)
}

// Against a real Gitea: the iteration rules (one branch and one pull
// request per thread, fast-forward pushes to the project's own pull
// request, never to another's) and the outputs the host posts (a comment,
// replies to review comments, a review, labels), hostile ones refused.
func TestGiteaIterate(t *testing.T) {
	t.Parallel()
	e := startGiteaIterate(t)

	t.Run("AnswerFlowPostsOneCommentOnly", func(t *testing.T) {
		is := e.issue(t, e.alice, "What does it do?", "Explain the readme.")
		asked := e.comment(t, e.alice, is.Index, "/pi fix what does it do?")
		job := e.job(int(is.Index))
		job.Job.Flow, job.Job.Trigger, job.Job.CommentID = "answer", "fix-comment", asked.ID
		res := completed
		res.NoChanges = true
		res.Outputs = map[string][]byte{jobs.OutputComment: []byte("It greets the world.\n")}
		pub, _, err := e.run(t, job, map[string]string{"README.md": "scribbled\n"}, nil, res)
		require.NoError(t, err)
		require.Empty(t, pub.PushedCommit)
		require.Empty(t, pub.PullRequestURL)
		branch := fmt.Sprintf("pi/issue-%d", is.Index)
		require.False(t, e.branchExists(branch), "no branch")
		require.Empty(t, e.pulls(t, branch), "no pull request")
		require.Equal(t, 1, countContaining(e.commentBodies(t, is.Index), "It greets the world."))
		status, reason := outputStatus(pub.Outputs, jobs.OutputComment)
		require.Equal(t, jobs.OutputPosted, status, reason)
	})

	// The issue's two jobs, then jobs on the pull request they opened.
	is := e.issue(t, e.alice, "Add numbers", "one and two")
	branch := fmt.Sprintf("pi/issue-%d", is.Index)
	var first, second workspace.Published
	var pullIndex int64

	t.Run("SecondJobOfIssueAddsCommitToItsPullRequest", func(t *testing.T) {
		var err error
		first, _, err = e.run(t, e.job(int(is.Index)), map[string]string{"one.txt": "1\n"}, nil, completed)
		require.NoError(t, err)
		second, _, err = e.run(t, e.job(int(is.Index)), map[string]string{"two.txt": "2\n"}, nil, completed)
		require.NoError(t, err)
		require.Equal(t, first.PullRequestURL, second.PullRequestURL)
		pulls := e.pulls(t, branch)
		require.Len(t, pulls, 1, "one pull request")
		pullIndex = pulls[0].Index
		commits, _, err := e.admin.ListRepoCommits(e.owner, "web", gitea.ListCommitOptions{SHA: branch})
		require.NoError(t, err)
		require.GreaterOrEqual(t, len(commits), 3)
		require.Equal(t, []string{second.PushedCommit, first.PushedCommit}, []string{commits[0].SHA, commits[1].SHA}, "two commits, in order")
	})

	t.Run("OwnPullRequestGetsCommitAndReplies", func(t *testing.T) {
		require.NotZero(t, pullIndex)
		review, _, err := e.alice.CreatePullReview(e.owner, "web", pullIndex, gitea.CreatePullReviewOptions{
			State: gitea.ReviewStateComment, Body: "Two things.",
			Comments: []gitea.CreatePullReviewComment{
				{Path: "one.txt", Body: "Spell it out.", NewLineNum: 1},
				{Path: "two.txt", Body: "This one too.", NewLineNum: 1},
			},
		})
		require.NoError(t, err)
		notes, _, err := e.admin.ListPullReviewComments(e.owner, "web", pullIndex, review.ID)
		require.NoError(t, err)
		require.Len(t, notes, 2)
		noteOn := map[string]int64{}
		for _, n := range notes {
			noteOn[n.Path] = n.ID
		}
		job := e.pullJob(pullIndex)
		job.Job.ReviewID = review.ID
		res := completed
		res.Outputs = map[string][]byte{
			jobs.OutputReview: []byte(mustJSON(t, map[string]any{
				"replies":  []map[string]any{{"to": noteOn["one.txt"], "body": "Spelt out."}, {"to": noteOn["two.txt"], "body": "Done too."}},
				"comments": []map[string]any{{"path": "three.txt", "line": 1, "body": "A third, while at it."}},
			})),
			jobs.OutputLabels: []byte(`{"add": ["needs-review"]}`),
		}
		pub, c, err := e.run(t, job, map[string]string{"one.txt": "one\n", "two.txt": "two\n", "three.txt": "three\n"}, nil, res)
		require.NoError(t, err)
		require.Equal(t, second.PushedCommit, c.Base(), "prepared on the pull request's head")
		require.Equal(t, branch, c.Branch())
		require.Equal(t, pub.PushedCommit, e.branchHead(t, branch), "pushed to the pull request's own branch")
		commits, _, err := e.admin.ListRepoCommits(e.owner, "web", gitea.ListCommitOptions{SHA: branch})
		require.NoError(t, err)
		require.Equal(t, second.PushedCommit, commits[1].SHA, "the old head is the new one's parent")
		require.Len(t, e.pulls(t, branch), 1, "no new pull request")

		for _, f := range []string{jobs.OutputReview, jobs.OutputLabels} {
			status, reason := outputStatus(pub.Outputs, f)
			require.Equal(t, jobs.OutputPosted, status, "%s: %s", f, reason)
		}
		after, _, err := e.admin.ListPullReviewComments(e.owner, "web", pullIndex, review.ID)
		require.NoError(t, err)
		replies := map[string]string{}
		for _, n := range after {
			if n.Reviewer != nil && n.Reviewer.UserName == e.owner {
				replies[n.Path] = n.Body
			}
		}
		require.Equal(t, map[string]string{"one.txt": "Spelt out.", "two.txt": "Done too."}, replies, "one reply to each inline review comment, in its thread")
		reviews, _, err := e.admin.ListPullReviews(e.owner, "web", pullIndex, gitea.ListPullReviewsOptions{})
		require.NoError(t, err)
		var ours *gitea.PullReview
		for _, rv := range reviews {
			if rv.Reviewer != nil && rv.Reviewer.UserName == e.owner && rv.CodeCommentsCount > 0 && rv.ID != review.ID {
				ours = rv
			}
		}
		require.NotNil(t, ours, "the inline comment is a review of the host's")
		require.Equal(t, gitea.ReviewStateComment, ours.State, "never an approval")
		labels, _, err := e.admin.GetIssueLabels(e.owner, "web", pullIndex, gitea.ListLabelsOptions{})
		require.NoError(t, err)
		require.Len(t, labels, 1)
		require.Equal(t, "needs-review", labels[0].Name)
	})

	t.Run("MovedBranchRefusedNotForced", func(t *testing.T) {
		require.NotZero(t, pullIndex)
		var theirs string
		res := completed
		res.Outputs = map[string][]byte{jobs.OutputComment: []byte("Moved on.\n")}
		_, _, err := e.run(t, e.pullJob(pullIndex), map[string]string{"four.txt": "4\n"}, func() {
			theirs = e.push(t, e.alice, branch, "", "alice.txt", "mine\n")
		}, res)
		var refusal *workspace.RefusalError
		require.ErrorAs(t, err, &refusal)
		require.Equal(t, jobs.ReasonHistoryRewritten, refusal.Reason)
		require.Equal(t, theirs, e.branchHead(t, branch), "nothing was rewritten")
		require.Zero(t, countContaining(e.commentBodies(t, pullIndex), "Moved on."))
	})

	t.Run("HostileOutputsRefusedOthersPosted", func(t *testing.T) {
		require.NotZero(t, pullIndex)
		res := completed
		res.Outputs = map[string][]byte{
			jobs.OutputComment: []byte("Fixed the rest.\n"),
			jobs.OutputReview:  []byte(`{"comments": [{"path": "README.md", "line": 1, "body": "Look here."}]}`),
			jobs.OutputLabels:  []byte(`{"add": ["approved"]}`),
		}
		before := e.branchHead(t, branch)
		reviewsBefore, _, err := e.admin.ListPullReviews(e.owner, "web", pullIndex, gitea.ListPullReviewsOptions{})
		require.NoError(t, err)
		pub, _, err := e.run(t, e.pullJob(pullIndex), map[string]string{"five.txt": "5\n"}, nil, res)
		require.NoError(t, err)
		require.NotEmpty(t, pub.PushedCommit, "the valid change still goes")
		require.NotEqual(t, before, e.branchHead(t, branch))
		status, _ := outputStatus(pub.Outputs, jobs.OutputReview)
		require.Equal(t, jobs.OutputRefused, status, "a comment on a path outside the diff")
		status, _ = outputStatus(pub.Outputs, jobs.OutputLabels)
		require.Equal(t, jobs.OutputRefused, status, "a label outside the allow-list")
		status, reason := outputStatus(pub.Outputs, jobs.OutputComment)
		require.Equal(t, jobs.OutputPosted, status, reason)
		require.Equal(t, 1, countContaining(e.commentBodies(t, pullIndex), "Fixed the rest."))
		reviewsAfter, _, err := e.admin.ListPullReviews(e.owner, "web", pullIndex, gitea.ListPullReviewsOptions{})
		require.NoError(t, err)
		require.Len(t, reviewsAfter, len(reviewsBefore), "no review posted")
		labels, _, err := e.admin.GetIssueLabels(e.owner, "web", pullIndex, gitea.ListLabelsOptions{})
		require.NoError(t, err)
		for _, l := range labels {
			require.NotEqual(t, "approved", l.Name)
		}
	})

	t.Run("OthersPullRequestIsNotPushedTo", func(t *testing.T) {
		head := e.push(t, e.alice, "main", "pi/alice", "alice.txt", "wip\n")
		pr, _, err := e.alice.CreatePullRequest(e.owner, "web", gitea.CreatePullRequestOption{Head: "pi/alice", Base: "main", Title: "Alice's change"})
		require.NoError(t, err)
		pub, c, err := e.run(t, e.pullJob(pr.Index), map[string]string{"alice.txt": "done\n"}, nil, completed)
		require.NoError(t, err)
		require.Equal(t, head, e.branchHead(t, "pi/alice"), "her branch is untouched")
		require.Equal(t, fmt.Sprintf("pi/pr-%d", pr.Index), c.Branch())
		require.Equal(t, pub.PushedCommit, e.branchHead(t, c.Branch()))
		ours := e.pulls(t, c.Branch())
		require.Len(t, ours, 1)
		require.Equal(t, "pi/alice", ours[0].Base.Ref, "proposed onto her branch")
		require.True(t, strings.HasSuffix(pub.PullRequestURL, fmt.Sprintf("/pulls/%d", ours[0].Index)))
	})
}
