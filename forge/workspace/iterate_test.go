package workspace_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pidispatch/pidispatch/forge/forgetest"
	"github.com/pidispatch/pidispatch/forge/workspace"
	"github.com/pidispatch/pidispatch/jobs"
)

// jobRun is one job of a test: it is prepared in a folder of its own, the
// agent's work is files written there (and commits made there), then it is
// published with res.
type jobRun struct {
	job   workspace.Job
	files map[string]string
	// work, when set, runs in the workspace after files are written.
	work func(t *testing.T, dir string)
	// beforePublish runs once the job ran, before it is published.
	beforePublish func(t *testing.T)
}

// run prepares, works and publishes one job on m, and returns what Publish
// answered and the checkout.
func run(t *testing.T, m *workspace.Manager, jr jobRun, res workspace.Result) (workspace.Published, *workspace.Checkout, error) {
	t.Helper()
	dir := t.TempDir()
	c, err := m.Prepare(context.Background(), jr.job, dir)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	for name, body := range jr.files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(body), 0o644))
	}
	if jr.work != nil {
		jr.work(t, dir)
	}
	if os.Geteuid() == 0 {
		// The job runs as another user: the workspace is handed to it.
		require.NoError(t, filepath.WalkDir(dir, func(p string, _ os.DirEntry, err error) error {
			if err != nil {
				return err
			}
			return os.Lchown(p, 65534, 65534)
		}))
	}
	if jr.beforePublish != nil {
		jr.beforePublish(t)
	}
	pub, err := c.Publish(context.Background(), res)
	return pub, c, err
}

// issueJob is job id about issue n of repo on GitHub.
func issueJob(id string, n int) workspace.Job {
	return workspace.Job{ID: id, Job: jobs.Job{Kind: jobs.KindForge, Repo: repo, Flow: "fix", Task: "t",
		ForgeEvent: jobs.ForgeEvent{Forge: jobs.ForgeGitHub, Number: n, Trigger: "fix-label"}}}
}

// pullJob is job id about pull request n of repo on GitHub.
func pullJob(id string, n int) workspace.Job {
	j := issueJob(id, n)
	j.Job.PullRequest = true
	return j
}

// withOutputs is completed with outputs, by name.
func withOutputs(outputs map[string]string) workspace.Result {
	res := completed
	res.Outputs = map[string][]byte{}
	for name, body := range outputs {
		res.Outputs[name] = []byte(body)
	}
	return res
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	data, err := json.Marshal(v)
	require.NoError(t, err)
	return string(data)
}

// outputStatus is the recorded status of file among results ("" when it is
// not recorded), and its reason.
func outputStatus(results []jobs.OutputResult, file string) (string, string) {
	for _, r := range results {
		if r.File == file {
			return r.Status, r.Reason
		}
	}
	return "", ""
}

// countContaining counts the texts that contain s.
func countContaining(texts []string, s string) int {
	n := 0
	for _, t := range texts {
		if strings.Contains(t, s) {
			n++
		}
	}
	return n
}

// commitsOn are the commits of branch of repo after base, oldest first.
func commitsOn(t *testing.T, git *forgetest.GitServer, branch, base string) []string {
	t.Helper()
	out := forgetest.Git(t, git.Dir(repo), "rev-list", "--reverse", base+".."+"refs/heads/"+branch)
	if out == "" {
		return nil
	}
	return strings.Split(out, "\n")
}

// isAncestor reports whether a is an ancestor of b in repo.
func isAncestor(t *testing.T, git *forgetest.GitServer, a, b string) bool {
	t.Helper()
	return forgetest.Git(t, git.Dir(repo), "merge-base", a, b) == a
}

func TestIterate(t *testing.T) {
	t.Parallel()

	// An answer-flow job's comment.md becomes exactly one comment, and the
	// files it left in its workspace become nothing: no commit, no branch,
	// no pull request.
	t.Run("AnswerFlowPostsOneCommentOnly", func(t *testing.T) {
		t.Parallel()
		b := setup(t, workspace.PublishPolicy{}, workspace.Limits{})
		withGitHubConfig(t, b, nil)
		asked := b.gh.AddIssueComment(repo, 5, "alice", "/pi fix what does it do?")
		job := issueJob("job-answer", 5)
		job.Job.Flow, job.Job.CommentID, job.Job.Trigger = "answer", asked, "fix-comment"
		res := withOutputs(map[string]string{jobs.OutputComment: "It greets the world.\n"})
		res.NoChanges = true
		pub, _, err := run(t, b.m, jobRun{job: job, files: map[string]string{"README.md": "scribbled\n", "notes.txt": "x\n"}}, res)
		require.NoError(t, err)
		require.Empty(t, pub.PushedCommit)
		require.Empty(t, pub.PullRequestURL)
		require.Empty(t, b.gh.Pulls(repo), "no pull request")
		require.Empty(t, b.git.Head(t, repo, "pi/issue-5"), "no branch")
		require.Equal(t, 1, countContaining(b.gh.Comments(repo, 5), "It greets the world."), "exactly one comment holds the answer")
		status, reason := outputStatus(pub.Outputs, jobs.OutputComment)
		require.Equal(t, jobs.OutputPosted, status, reason)
		require.Len(t, b.gh.Comments(repo, 5), 1, "the answer, and nothing else of the host's")
	})

	// A second job for the same issue continues the first one's branch: one
	// pull request, two commits, in order.
	t.Run("SecondJobOfIssueAddsCommitToItsPullRequest", func(t *testing.T) {
		t.Parallel()
		b := setup(t, workspace.PublishPolicy{}, workspace.Limits{})
		first, _, err := run(t, b.m, jobRun{job: issueJob("job-1", 5), files: map[string]string{"one.txt": "1\n"}}, completed)
		require.NoError(t, err)
		require.Equal(t, "pi/issue-5", first.Branch)
		require.NotEmpty(t, first.PullRequestURL)

		second, c, err := run(t, b.m, jobRun{job: issueJob("job-2", 5), files: map[string]string{"two.txt": "2\n"},
			work: func(t *testing.T, dir string) {
				data, err := os.ReadFile(filepath.Join(dir, "one.txt"))
				require.NoError(t, err, "the second job starts where the first one left the branch")
				require.Equal(t, "1\n", string(data))
			}}, completed)
		require.NoError(t, err)
		require.Equal(t, first.PushedCommit, c.Base(), "prepared on the branch's head")
		require.Equal(t, first.PullRequestURL, second.PullRequestURL, "the same pull request")
		require.Len(t, b.gh.Pulls(repo), 1, "no second pull request")
		require.Equal(t, []string{first.PushedCommit, second.PushedCommit}, commitsOn(t, b.git, "pi/issue-5", b.base), "two commits, in order")
		require.Contains(t, forgetest.Git(t, b.git.Dir(repo), "show", second.PushedCommit+":one.txt"), "1")
		require.Equal(t, b.base, b.git.Head(t, repo, "main"))
	})

	// A job on the project's own pull request is prepared on its head
	// branch, pushes a new commit to it (the old head an ancestor of the new
	// one), replies to each inline review comment and comments on the
	// pull request's diff where the diff has the line.
	t.Run("OwnPullRequestGetsCommitAndReplies", func(t *testing.T) {
		t.Parallel()
		b := setup(t, workspace.PublishPolicy{}, workspace.Limits{})
		withGitHubConfig(t, b, nil)
		first, _, err := run(t, b.m, jobRun{job: issueJob("job-1", 5), files: map[string]string{"src/app.go": "package app\n\nfunc A() {}\n"}}, completed)
		require.NoError(t, err)
		n := b.gh.Pulls(repo)[0].GetNumber()
		review := b.gh.AddReview(repo, n, "frank", "CHANGES_REQUESTED", "Two things.",
			forgetest.ReviewNote{Path: "src/app.go", Line: 3, Author: "frank", Body: "Name it B."},
			forgetest.ReviewNote{Path: "src/app.go", Line: 1, Author: "frank", Body: "And document it."})
		noteIDs := b.gh.ReviewNoteIDs(repo, review)
		require.Len(t, noteIDs, 2)
		reviewOutput := mustJSON(t, map[string]any{
			"replies":  []map[string]any{{"to": noteIDs[0], "body": "Renamed to B."}, {"to": noteIDs[1], "body": "Documented."}},
			"comments": []map[string]any{{"path": "src/app.go", "line": 4, "body": "B is documented here."}},
		})
		job := pullJob("job-2", n)
		job.Job.ReviewID = review
		var head string
		jr := jobRun{job: job, files: map[string]string{"src/app.go": "package app\n\n// B does nothing.\nfunc B() {}\n"},
			work: func(t *testing.T, dir string) {
				require.Equal(t, "pi/issue-5", forgetest.Git(t, dir, "branch", "--show-current"))
				head = forgetest.Git(t, dir, "rev-parse", "HEAD")
			}}
		pub, c, err := run(t, b.m, jr, withOutputs(map[string]string{jobs.OutputReview: reviewOutput}))
		require.NoError(t, err)
		require.Equal(t, first.PushedCommit, head, "prepared on the pull request's head")
		require.Equal(t, "pi/issue-5", c.Branch())
		require.Equal(t, pub.PushedCommit, b.git.Head(t, repo, "pi/issue-5"), "pushed to the pull request's own branch")
		require.True(t, isAncestor(t, b.git, first.PushedCommit, pub.PushedCommit), "the old head is an ancestor of the new one")
		require.Len(t, b.gh.Pulls(repo), 1, "no new pull request")
		require.Equal(t, b.gh.Pulls(repo)[0].GetHTMLURL(), pub.PullRequestURL)

		status, reason := outputStatus(pub.Outputs, jobs.OutputReview)
		require.Equal(t, jobs.OutputPosted, status, reason)
		replies := b.gh.Replies(repo)
		require.Len(t, replies, 2, "one reply to each inline review comment")
		require.ElementsMatch(t, noteIDs, []int64{replies[0].To, replies[1].To})
		reviews := b.gh.Reviews(repo)
		require.Len(t, reviews, 1)
		require.Equal(t, "COMMENT", reviews[0].Review.GetEvent(), "never an approval")
		require.Equal(t, pub.PushedCommit, reviews[0].Review.GetCommitID(), "on the head the job ended with")
		require.Len(t, reviews[0].Review.Comments, 1)
		require.Equal(t, 4, reviews[0].Review.Comments[0].GetLine())
	})

	// A pull request someone else opened is never pushed to, even from a
	// pi/ branch: the job's change is a new pull request onto its branch.
	// One from a fork is refused.
	t.Run("OthersPullRequestIsNotPushedTo", func(t *testing.T) {
		t.Parallel()
		b := setup(t, workspace.PublishPolicy{}, workspace.Limits{})
		withGitHubConfig(t, b, nil)
		head := b.git.Commit(t, repo, "main", "pi/issue-9", map[string]string{"feature.txt": "wip\n"})
		n := b.gh.OpenPullBy(t, repo, "pi/issue-9", "main", "mallory")
		pub, c, err := run(t, b.m, jobRun{job: pullJob("job-3", n), files: map[string]string{"feature.txt": "done\n"}}, completed)
		require.NoError(t, err)
		require.Equal(t, head, b.git.Head(t, repo, "pi/issue-9"), "their branch is untouched")
		require.Equal(t, fmt.Sprintf("pi/pr-%d", n), c.Branch())
		require.Equal(t, pub.PushedCommit, b.git.Head(t, repo, c.Branch()))
		pulls := b.gh.Pulls(repo)
		require.Len(t, pulls, 2)
		require.Equal(t, "pi/issue-9", pulls[1].GetBase().GetRef(), "proposed onto their branch")
		require.Equal(t, c.Branch(), pulls[1].GetHead().GetRef())

		// From a fork: nothing is pushed anywhere.
		fork := b.git.Commit(t, repo, "main", "theirs", map[string]string{"fork.txt": "x\n"})
		f := b.gh.OpenPullBy(t, repo, "theirs", "main", "mallory")
		b.gh.SetPullHeadRepo(repo, f, "mallory/web")
		_, c, err = run(t, b.m, jobRun{job: pullJob("job-4", f), files: map[string]string{"fork.txt": "changed\n"}}, completed)
		var refusal *workspace.RefusalError
		require.ErrorAs(t, err, &refusal)
		require.Equal(t, jobs.ReasonProtectedBranch, refusal.Reason)
		require.Empty(t, c.Branch())
		require.Equal(t, fork, b.git.Head(t, repo, "theirs"))
		require.Empty(t, b.git.Head(t, repo, fmt.Sprintf("pi/pr-%d", f)))
		require.Len(t, b.gh.Pulls(repo), 3, "only the fork's own")
	})

	// A push over a branch someone moved meanwhile is refused, not forced:
	// their commit stays.
	t.Run("MovedBranchRefusedNotForced", func(t *testing.T) {
		t.Parallel()
		b := setup(t, workspace.PublishPolicy{}, workspace.Limits{})
		withGitHubConfig(t, b, nil)
		_, _, err := run(t, b.m, jobRun{job: issueJob("job-1", 5), files: map[string]string{"one.txt": "1\n"}}, completed)
		require.NoError(t, err)
		n := b.gh.Pulls(repo)[0].GetNumber()
		var theirs string
		res := withOutputs(map[string]string{jobs.OutputComment: "Done.\n"})
		_, _, err = run(t, b.m, jobRun{job: pullJob("job-2", n), files: map[string]string{"two.txt": "2\n"},
			beforePublish: func(t *testing.T) {
				theirs = b.git.Commit(t, repo, "pi/issue-5", "pi/issue-5", map[string]string{"theirs.txt": "mine\n"})
			}}, res)
		var refusal *workspace.RefusalError
		require.ErrorAs(t, err, &refusal)
		require.Equal(t, jobs.ReasonHistoryRewritten, refusal.Reason)
		require.Equal(t, theirs, b.git.Head(t, repo, "pi/issue-5"), "nothing was rewritten")
		require.Zero(t, countContaining(b.gh.Comments(repo, n), "Done."), "the refused job's comment is not posted")
	})

	// Hostile outputs are refused whole, each on its own, while the job's
	// change and its other, valid outputs still go.
	t.Run("HostileOutputsRefusedOthersPosted", func(t *testing.T) {
		t.Parallel()
		b := setup(t, workspace.PublishPolicy{Labels: []string{"needs-review"}}, workspace.Limits{})
		_, _, err := run(t, b.m, jobRun{job: issueJob("job-1", 5), files: map[string]string{"src/app.go": "package app\n\nfunc A() {}\n"}}, completed)
		require.NoError(t, err)
		n := b.gh.Pulls(repo)[0].GetNumber()
		res := withOutputs(map[string]string{
			jobs.OutputComment: "Fixed the rest.\n",
			// A comment on a path the pull request does not change.
			jobs.OutputReview: mustJSON(t, map[string]any{"comments": []map[string]any{{"path": "README.md", "line": 1, "body": "Look here."}}}),
			// A label the trigger does not allow.
			jobs.OutputLabels: mustJSON(t, map[string]any{"add": []string{"approved"}}),
		})
		pub, _, err := run(t, b.m, jobRun{job: pullJob("job-2", n), files: map[string]string{"src/app.go": "package app\n\nfunc B() {}\n"}}, res)
		require.NoError(t, err)
		require.NotEmpty(t, pub.PushedCommit, "the valid change still goes")
		status, reason := outputStatus(pub.Outputs, jobs.OutputReview)
		require.Equal(t, jobs.OutputRefused, status)
		require.NotEmpty(t, reason)
		require.Empty(t, b.gh.Reviews(repo), "nothing of the review is posted")
		status, reason = outputStatus(pub.Outputs, jobs.OutputLabels)
		require.Equal(t, jobs.OutputRefused, status)
		require.NotEmpty(t, reason)
		require.NotContains(t, b.gh.Labels(repo, n), "approved")
		status, reason = outputStatus(pub.Outputs, jobs.OutputComment)
		require.Equal(t, jobs.OutputPosted, status, reason)
		require.Equal(t, 1, countContaining(b.gh.Comments(repo, n), "Fixed the rest."))

		// The allowed label is added; a worker's refusal is recorded as it is.
		res = withOutputs(map[string]string{jobs.OutputLabels: mustJSON(t, map[string]any{"add": []string{"needs-review"}})})
		res.Refused = []jobs.OutputResult{{File: jobs.OutputComment, Status: jobs.OutputRefused, Reason: "not a regular file"}}
		pub, _, err = run(t, b.m, jobRun{job: pullJob("job-3", n)}, res)
		require.NoError(t, err)
		require.Contains(t, b.gh.Labels(repo, n), "needs-review")
		require.Equal(t, []jobs.OutputResult{
			{File: jobs.OutputComment, Status: jobs.OutputRefused, Reason: "not a regular file"},
			{File: jobs.OutputLabels, Status: jobs.OutputPosted},
		}, pub.Outputs)
	})
}
