package workspace_test

import (
	"bytes"
	"context"
	"log/slog"
	"testing"
	"time"

	"code.gitea.io/sdk/gitea"
	"github.com/stretchr/testify/require"

	"github.com/pidispatch/pidispatch/forge/forgetest"
	"github.com/pidispatch/pidispatch/forge/token"
	"github.com/pidispatch/pidispatch/forge/workspace"
	"github.com/pidispatch/pidispatch/jobs"
)

// Against a real Gitea: the delivery named <admin>/web by its id, and the
// job runs on it; then web is renamed to web-old and a new web is created. Gitea
// answers the name with the new repository: the job is refused before any
// clone. A job naming the new repository's id runs on it.
func TestGiteaPrepareRefusesARepositoryRecreatedUnderTheSameName(t *testing.T) {
	t.Parallel()
	g := forgetest.StartGitea(t)
	admin, err := gitea.NewClient(g.URL, gitea.SetToken(g.AdminToken))
	require.NoError(t, err)
	first, _, err := admin.CreateRepo(gitea.CreateRepoOption{Name: "web", AutoInit: true, DefaultBranch: "main", Readme: "Default"})
	require.NoError(t, err)
	repo := g.AdminUser + "/web"
	var logs bytes.Buffer
	m, err := workspace.New(workspace.Config{
		Forges: map[jobs.Forge]workspace.Forge{jobs.ForgeForgejo: {
			Minter: token.Static{Token: token.New(g.AdminToken, time.Time{})},
			API:    &workspace.Gitea{URL: g.URL},
		}},
		StateDir: t.TempDir(), Host: "h1", Backoff: 10 * time.Millisecond,
		Logger: slog.New(slog.NewJSONHandler(&logs, nil)),
	})
	require.NoError(t, err)
	job := workspace.Job{ID: "job-1", Job: jobs.Job{Kind: jobs.KindForge, Repo: repo, Flow: "fix", Task: "t",
		ForgeEvent: jobs.ForgeEvent{Forge: jobs.ForgeForgejo, RepoID: first.ID, Trigger: "fix"}}}

	// The delivery's repository runs.
	c, err := m.Prepare(context.Background(), job, t.TempDir())
	require.NoError(t, err)
	require.NoError(t, c.Close())

	// Renamed away, and the name taken again by another repository.
	old := "web-old"
	_, _, err = admin.EditRepo(g.AdminUser, "web", gitea.EditRepoOption{Name: &old})
	require.NoError(t, err)
	second, _, err := admin.CreateRepo(gitea.CreateRepoOption{Name: "web", AutoInit: true, DefaultBranch: "main", Readme: "Default"})
	require.NoError(t, err)
	require.NotEqual(t, first.ID, second.ID)
	dir := t.TempDir()
	_, err = m.Prepare(context.Background(), job, dir)
	requireRepoIDRefused(t, err, &logs, first.ID, second.ID, []string{g.AdminToken})
	requireEmptyDir(t, dir)
	comments, _, err := admin.ListRepoIssueComments(g.AdminUser, "web", gitea.ListIssueCommentOptions{})
	require.NoError(t, err)
	require.Empty(t, comments, "nothing written on the other repository")

	job.Job.RepoID = second.ID
	c, err = m.Prepare(context.Background(), job, t.TempDir())
	require.NoError(t, err)
	require.NoError(t, c.Close())
}
