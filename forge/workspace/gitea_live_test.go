package workspace_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"code.gitea.io/sdk/gitea"
	"github.com/stretchr/testify/require"

	"github.com/pidispatch/pidispatch/forge/forgetest"
	"github.com/pidispatch/pidispatch/forge/token"
	"github.com/pidispatch/pidispatch/forge/workspace"
	"github.com/pidispatch/pidispatch/jobs"
)

// Against a real Gitea: the host clones with the forge's token (the clone URL
// from Gitea's own answer), the job's change becomes one commit on
// pi/<job id>, a WIP (draft) pull request references the issue, the issue
// gets the host's comments, a workflow file is refused, and a second publish
// opens no second pull request.
func TestGiteaPublish(t *testing.T) {
	t.Parallel()
	g := forgetest.StartGitea(t)
	admin, err := gitea.NewClient(g.URL, gitea.SetToken(g.AdminToken))
	require.NoError(t, err)
	_, _, err = admin.CreateRepo(gitea.CreateRepoOption{Name: "web", AutoInit: true, DefaultBranch: "main", Readme: "Default"})
	require.NoError(t, err)
	issue, _, err := admin.CreateIssue(g.AdminUser, "web", gitea.CreateIssueOption{Title: "fix the readme"})
	require.NoError(t, err)
	repo := g.AdminUser + "/web"
	mainBefore, _, err := admin.GetRepoBranch(g.AdminUser, "web", "main")
	require.NoError(t, err)

	m, err := workspace.New(workspace.Config{
		Forges: map[jobs.Forge]workspace.Forge{jobs.ForgeForgejo: {
			Minter: token.Static{Token: token.New(g.AdminToken, time.Time{})},
			API:    &workspace.Gitea{URL: g.URL},
		}},
		StateDir: t.TempDir(), Host: "h1", Backoff: 10 * time.Millisecond,
	})
	require.NoError(t, err)
	job := workspace.Job{ID: "job-1", Job: jobs.Job{Kind: jobs.KindForge, Repo: repo, Flow: "fix", Task: "t",
		ForgeEvent: jobs.ForgeEvent{Forge: jobs.ForgeForgejo, Number: int(issue.Index), Trigger: "fix"}}}

	publish := func(t *testing.T, base string, files map[string]string) (workspace.Published, error) {
		dir := t.TempDir()
		c, err := m.Prepare(context.Background(), job, dir)
		require.NoError(t, err)
		defer func() { _ = c.Close() }()
		require.Equal(t, base, c.Base())
		for _, name := range []string{".git/config", ".git/FETCH_HEAD"} {
			data, _ := os.ReadFile(filepath.Join(dir, name))
			require.NotContains(t, string(data), g.AdminToken, name)
		}
		for name, body := range files {
			p := filepath.Join(dir, filepath.FromSlash(name))
			require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
			require.NoError(t, os.WriteFile(p, []byte(body), 0o644))
		}
		return c.Publish(context.Background(), workspace.Result{Outcome: jobs.OutcomeCompleted, Reason: jobs.ReasonCompleted, Turns: 2})
	}

	_, err = publish(t, mainBefore.Commit.ID, map[string]string{".gitea/workflows/x.yml": "on: push\n"})
	var refusal *workspace.RefusalError
	require.ErrorAs(t, err, &refusal)
	require.Equal(t, jobs.ReasonCIChange, refusal.Reason)

	pub, err := publish(t, mainBefore.Commit.ID, map[string]string{"README.md": "fixed\n"})
	require.NoError(t, err)
	require.NotEmpty(t, pub.PullRequestURL)
	branch, _, err := admin.GetRepoBranch(g.AdminUser, "web", fmt.Sprintf("pi/issue-%d", issue.Index))
	require.NoError(t, err)
	require.Equal(t, pub.PushedCommit, branch.Commit.ID)
	after, _, err := admin.GetRepoBranch(g.AdminUser, "web", "main")
	require.NoError(t, err)
	require.Equal(t, mainBefore.Commit.ID, after.Commit.ID, "the default branch is untouched")

	// The job's next attempt continues the issue's branch: one more commit,
	// fast-forward, on the same pull request.
	again, err := publish(t, pub.PushedCommit, map[string]string{"README.md": "fixed again\n"})
	require.NoError(t, err)
	require.Equal(t, pub.PullRequestURL, again.PullRequestURL)
	commits, _, err := admin.ListRepoCommits(g.AdminUser, "web", gitea.ListCommitOptions{SHA: again.PushedCommit})
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(commits), 2)
	require.Equal(t, pub.PushedCommit, commits[1].SHA, "the first commit is the second's parent")

	prs, _, err := admin.ListRepoPullRequests(g.AdminUser, "web", gitea.ListPullRequestsOptions{State: gitea.StateAll})
	require.NoError(t, err)
	require.Len(t, prs, 1, "a retry opens no second pull request")
	require.True(t, strings.HasPrefix(prs[0].Title, "WIP: "), prs[0].Title)
	require.Contains(t, prs[0].Body, "Refs #")
	require.Equal(t, "main", prs[0].Base.Ref)

	comments, _, err := admin.ListIssueComments(g.AdminUser, "web", issue.Index, gitea.ListIssueCommentOptions{})
	require.NoError(t, err)
	var bodies []string
	for _, c := range comments {
		bodies = append(bodies, c.Body)
	}
	require.Empty(t, bodies, "publishing writes no comment of its own: the status comment says it")
}
