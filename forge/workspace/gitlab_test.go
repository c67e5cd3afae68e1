package workspace_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pidispatch/pidispatch/forge/forgetest"
	"github.com/pidispatch/pidispatch/forge/token"
	"github.com/pidispatch/pidispatch/forge/workspace"
	"github.com/pidispatch/pidispatch/jobs"
)

// GitLab: a project token minted per job (Developer, api and
// write_repository, on the one project) clones a nested-group project and
// publishes a draft merge request; the notes are the host's; a protection
// rule with a wildcard covering pi/* refuses the push.
func TestGitLabPublish(t *testing.T) {
	t.Parallel()
	const project = "acme/platform/web"
	setup := func(t *testing.T, protected ...string) (*forgetest.GitServer, *forgetest.GitLab, *workspace.Manager, string) {
		git := forgetest.StartGitServer(t, nil)
		base := git.CreateRepo(t, project, "main", map[string]string{"README.md": "hello\n"})
		gl := forgetest.StartGitLab(t, git)
		gl.AddProject(project, "main", protected...)
		m, err := workspace.New(workspace.Config{
			Forges: map[jobs.Forge]workspace.Forge{jobs.ForgeGitLab: {
				Minter: &token.GitLabProject{URL: gl.URL, Parent: token.New(gl.Parent, time.Time{})},
				API:    &workspace.GitLab{URL: gl.URL},
			}},
			StateDir: t.TempDir(), Host: "h1", Backoff: time.Millisecond,
		})
		require.NoError(t, err)
		return git, gl, m, base
	}
	job := workspace.Job{ID: "job-7", Job: jobs.Job{Kind: jobs.KindForge, Repo: project, Flow: "fix", Task: "t",
		ForgeEvent: jobs.ForgeEvent{Forge: jobs.ForgeGitLab, Number: 3, Trigger: "fix"}}}

	t.Run("DraftMergeRequest", func(t *testing.T) {
		t.Parallel()
		git, gl, m, base := setup(t)
		dir := t.TempDir()
		c, err := m.Prepare(context.Background(), job, dir)
		require.NoError(t, err)
		defer func() { _ = c.Close() }()
		require.Equal(t, base, c.Base())
		require.NoError(t, os.WriteFile(filepath.Join(dir, "README.md"), []byte("fixed\n"), 0o644))
		pub, err := c.Publish(context.Background(), workspace.Result{Outcome: jobs.OutcomeCompleted, Reason: jobs.ReasonCompleted})
		require.NoError(t, err)
		require.Equal(t, pub.PushedCommit, git.Head(t, project, "pi/issue-3"))
		require.Equal(t, base, git.Head(t, project, "main"))
		mrs := gl.MergeRequests(project)
		require.Len(t, mrs, 1)
		require.True(t, mrs[0].Draft)
		require.True(t, strings.HasPrefix(mrs[0].Title, "Draft: "))
		require.Equal(t, "main", mrs[0].TargetBranch)
		require.Equal(t, mrs[0].WebURL, pub.PullRequestURL)
		require.Empty(t, gl.Notes(project, "issue/3"), "publishing writes no note of its own: the status comment says it")
		mints := gl.Mints()
		require.NotEmpty(t, mints)
		require.Equal(t, []string{"api", "write_repository"}, *mints[0].Scopes)
		require.NotEmpty(t, gl.Revoked())
		require.ElementsMatch(t, gl.Tokens(), gl.Revoked(), "the job's project tokens are revoked once it is done")
		for _, tok := range append(gl.Tokens(), gl.Parent) {
			data, err := os.ReadFile(filepath.Join(dir, ".git", "config"))
			require.NoError(t, err)
			require.NotContains(t, string(data), tok)
		}
	})

	t.Run("WildcardProtectionRefused", func(t *testing.T) {
		t.Parallel()
		git, gl, m, _ := setup(t, "pi/*")
		dir := t.TempDir()
		c, err := m.Prepare(context.Background(), job, dir)
		require.NoError(t, err)
		defer func() { _ = c.Close() }()
		require.NoError(t, os.WriteFile(filepath.Join(dir, "README.md"), []byte("fixed\n"), 0o644))
		_, err = c.Publish(context.Background(), workspace.Result{Outcome: jobs.OutcomeCompleted, Reason: jobs.ReasonCompleted})
		var refusal *workspace.RefusalError
		require.ErrorAs(t, err, &refusal)
		require.Equal(t, jobs.ReasonProtectedBranch, refusal.Reason)
		require.Empty(t, git.Head(t, project, "pi/issue-3"))
		require.Empty(t, gl.MergeRequests(project))
	})
}

// GitLab runs quick actions written in a note: a job's comment.md with
// /merge and /approve lines merges nothing and approves nothing, and the
// text the host posts has no line starting with /. A label outside the
// trigger's list is refused, while the job's change and its comment still
// go; the pull request's description is neutralised the same way.
func TestGitLabHostileOutputs(t *testing.T) {
	t.Parallel()
	const project = "acme/platform/web"
	git := forgetest.StartGitServer(t, nil)
	git.CreateRepo(t, project, "main", map[string]string{"README.md": "hello\n"})
	gl := forgetest.StartGitLab(t, git)
	gl.AddProject(project, "main")
	git.Commit(t, project, "main", "feature", map[string]string{"feature.txt": "wip\n"})
	iid := gl.OpenMergeRequest(t, project, "feature", "main", "erin", "Add a feature", "Adds it.")
	m, err := workspace.New(workspace.Config{
		Forges: map[jobs.Forge]workspace.Forge{jobs.ForgeGitLab: {
			Minter: &token.GitLabProject{URL: gl.URL, Parent: token.New(gl.Parent, time.Time{})},
			API:    &workspace.GitLab{URL: gl.URL},
		}},
		Policy: func(jobs.Job) workspace.PublishPolicy {
			return workspace.PublishPolicy{Labels: []string{"needs-review"}}
		},
		StateDir: t.TempDir(), Host: "h1", Backoff: time.Millisecond,
	})
	require.NoError(t, err)
	job := workspace.Job{ID: "job-9", Job: jobs.Job{Kind: jobs.KindForge, Repo: project, Flow: "fix", Task: "t",
		ForgeEvent: jobs.ForgeEvent{Forge: jobs.ForgeGitLab, Number: iid, PullRequest: true, Trigger: "fix"}}}
	dir := t.TempDir()
	c, err := m.Prepare(context.Background(), job, dir)
	require.NoError(t, err)
	defer func() { _ = c.Close() }()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "feature.txt"), []byte("done\n"), 0o644))
	hostile := "Done, merging it for you.\n/merge\n/approve\n/label ~approved\n"
	pub, err := c.Publish(context.Background(), workspace.Result{Outcome: jobs.OutcomeCompleted, Reason: jobs.ReasonCompleted,
		PullRequest: &jobs.PullRequestText{Title: "Finish the feature", Body: "Finished.\n/merge\n/approve"},
		Outputs: map[string][]byte{
			jobs.OutputComment: []byte(hostile),
			jobs.OutputLabels:  []byte(`{"add": ["approved"]}`),
		}})
	require.NoError(t, err)

	require.NotEmpty(t, pub.PushedCommit, "the valid change still goes")
	require.Equal(t, "feature", gl.MergeRequests(project)[0].SourceBranch)
	require.Equal(t, "opened", gl.MergeRequests(project)[0].State, "nothing merged")
	require.False(t, gl.Approved(project, iid), "nothing approved")
	mrs := gl.MergeRequests(project)
	require.Len(t, mrs, 2, "the change is a new merge request onto the feature branch")
	require.Equal(t, "opened", mrs[1].State, "its description merged nothing")
	require.False(t, gl.Approved(project, int(mrs[1].IID)))
	require.Empty(t, gl.QuickActions(project), "no quick action ran")
	require.NotContains(t, gl.Labels(project, fmt.Sprintf("mr/%d", iid)), "approved")

	status, reason := outputStatus(pub.Outputs, jobs.OutputComment)
	require.Equal(t, jobs.OutputPosted, status, reason)
	status, _ = outputStatus(pub.Outputs, jobs.OutputLabels)
	require.Equal(t, jobs.OutputRefused, status)
	var posted string
	for _, n := range gl.Notes(project, fmt.Sprintf("mr/%d", iid)) {
		if strings.Contains(n, "merging it for you") {
			posted = n
		}
	}
	require.NotEmpty(t, posted, "the comment is posted")
	for line := range strings.SplitSeq(posted, "\n") {
		require.False(t, strings.HasPrefix(line, "/"), "a line starts with /: %q", line)
	}
	for line := range strings.SplitSeq(mrs[1].Description, "\n") {
		require.False(t, strings.HasPrefix(line, "/"), "a description line starts with /: %q", line)
	}
}

// GitLab: each job's project token is a bot user of its own, so a merge
// request is the project's own when a bot user of the project opened it
// and it carries the host's footer. A job on it pushes to its branch; one
// on a person's merge request from a pi/ branch does not.
func TestGitLabOwnMergeRequest(t *testing.T) {
	t.Parallel()
	const project = "acme/platform/web"
	git := forgetest.StartGitServer(t, nil)
	base := git.CreateRepo(t, project, "main", map[string]string{"README.md": "hello\n"})
	gl := forgetest.StartGitLab(t, git)
	gl.AddProject(project, "main")
	m, err := workspace.New(workspace.Config{
		Forges: map[jobs.Forge]workspace.Forge{jobs.ForgeGitLab: {
			Minter: &token.GitLabProject{URL: gl.URL, Parent: token.New(gl.Parent, time.Time{})},
			API:    &workspace.GitLab{URL: gl.URL},
		}},
		StateDir: t.TempDir(), Host: "h1", Backoff: time.Millisecond,
	})
	require.NoError(t, err)
	job := func(id string, n int, pull bool) workspace.Job {
		return workspace.Job{ID: id, Job: jobs.Job{Kind: jobs.KindForge, Repo: project, Flow: "fix", Task: "t",
			ForgeEvent: jobs.ForgeEvent{Forge: jobs.ForgeGitLab, Number: n, PullRequest: pull, Trigger: "fix"}}}
	}
	publish := func(t *testing.T, j workspace.Job, file string) (workspace.Published, *workspace.Checkout) {
		dir := t.TempDir()
		c, err := m.Prepare(context.Background(), j, dir)
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		require.NoError(t, os.WriteFile(filepath.Join(dir, file), []byte(file+"\n"), 0o644))
		pub, err := c.Publish(context.Background(), workspace.Result{Outcome: jobs.OutcomeCompleted, Reason: jobs.ReasonCompleted})
		require.NoError(t, err)
		return pub, c
	}

	first, _ := publish(t, job("job-1", 3, false), "one.txt")
	mrs := gl.MergeRequests(project)
	require.Len(t, mrs, 1)
	require.True(t, strings.HasPrefix(mrs[0].Author.Username, "project_"), mrs[0].Author.Username)
	own := int(mrs[0].IID)
	second, c := publish(t, job("job-2", own, true), "two.txt")
	require.Equal(t, "pi/issue-3", c.Branch(), "the merge request's own branch")
	require.Equal(t, first.PushedCommit, forgetest.Git(t, git.Dir(project), "rev-parse", second.PushedCommit+"^"), "a new commit on top")
	require.Equal(t, second.PushedCommit, git.Head(t, project, "pi/issue-3"))
	require.Len(t, gl.MergeRequests(project), 1, "no second merge request")

	// A person's merge request from a pi/ branch, its description quoting
	// the footer: not the project's.
	head := git.Commit(t, project, "main", "pi/issue-8", map[string]string{"x.txt": "x\n"})
	theirs := gl.OpenMergeRequest(t, project, "pi/issue-8", "main", "mallory", "Mine", "---\nProposed by pidispatch job `job-0`")
	_, c = publish(t, job("job-3", theirs, true), "three.txt")
	require.Equal(t, fmt.Sprintf("pi/pr-%d", theirs), c.Branch())
	require.Equal(t, head, git.Head(t, project, "pi/issue-8"), "their branch is untouched")
	require.NotEqual(t, base, head)
}
