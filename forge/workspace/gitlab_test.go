package workspace_test

import (
	"context"
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
		require.Equal(t, pub.PushedCommit, git.Head(t, project, "pi/job-7"))
		require.Equal(t, base, git.Head(t, project, "main"))
		mrs := gl.MergeRequests(project)
		require.Len(t, mrs, 1)
		require.True(t, mrs[0].Draft)
		require.True(t, strings.HasPrefix(mrs[0].Title, "Draft: "))
		require.Equal(t, "main", mrs[0].TargetBranch)
		require.Equal(t, mrs[0].WebURL, pub.PullRequestURL)
		notes := gl.Notes(project, "issue/3")
		require.Len(t, notes, 2)
		require.Contains(t, notes[1], pub.PullRequestURL)
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
		require.Empty(t, git.Head(t, project, "pi/job-7"))
		require.Empty(t, gl.MergeRequests(project))
	})
}
