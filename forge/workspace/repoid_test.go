package workspace_test

import (
	"bytes"
	"context"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pidispatch/pidispatch/forge/forgetest"
	"github.com/pidispatch/pidispatch/forge/token"
	"github.com/pidispatch/pidispatch/forge/workspace"
	"github.com/pidispatch/pidispatch/jobs"
)

// requireRepoIDRefused checks a Prepare refused for a repository id the
// forge does not answer: final (repo-gone), nothing cloned, the refusal
// logged with both ids and no token.
func requireRepoIDRefused(t *testing.T, err error, logs *bytes.Buffer, want, got int64, tokens []string) {
	t.Helper()
	require.ErrorIs(t, err, workspace.ErrRepoIDMismatch)
	require.ErrorIs(t, err, token.ErrNoRepository, "final: the job's repository is not under that name")
	require.ErrorContains(t, err, strconv.FormatInt(want, 10))
	require.ErrorContains(t, err, strconv.FormatInt(got, 10))
	line := logs.String()
	require.Contains(t, line, `"msg":"forge_repo_id_mismatch"`)
	require.Contains(t, line, `"jobRepoId":`+strconv.FormatInt(want, 10))
	require.Contains(t, line, `"forgeRepoId":`+strconv.FormatInt(got, 10))
	for _, tok := range tokens {
		require.NotContains(t, line, tok)
		require.NotContains(t, err.Error(), tok)
	}
}

// GitHub: the delivery named acme/web with its id; before the job runs the
// repository is renamed away and the attacker creates another under the
// same name. The API answers the name with the new repository's id: the job
// is refused before anything is cloned, git hears nothing, no comment is
// written, and the token minted to ask is revoked. The same id runs as
// before.
func TestPrepareRefusesARepositoryRecreatedUnderTheSameName(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	b := setupWith(t, workspace.PublishPolicy{}, workspace.Limits{}, func(c *workspace.Config) {
		c.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
	})
	delivered := b.gh.RepoID(repo)
	b.job.Job.RepoID = delivered
	b.gh.SetRepoID(repo, delivered+4242) // the attacker's repository, same name

	_, err := b.m.Prepare(context.Background(), b.job, b.dir)
	requireRepoIDRefused(t, err, &logs, delivered, delivered+4242, b.gh.Tokens())
	require.Zero(t, b.git.Requests(), "nothing cloned or fetched")
	require.Empty(t, b.git.Passwords(), "git was sent no token")
	requireEmptyDir(t, b.dir)
	require.Empty(t, b.gh.Comments(repo, 5), "no comment on the attacker's repository")
	require.ElementsMatch(t, b.gh.Tokens(), b.gh.Revoked(), "the token minted to ask is revoked")

	// The repository the delivery named: it runs.
	b.gh.SetRepoID(repo, delivered)
	c := b.prepare(t)
	require.Equal(t, b.base, c.Base())
}

// A job without a repository id (queued before jobs carried one, or a
// manual run) runs by name, as before.
func TestPrepareWithoutARepositoryIDRunsByName(t *testing.T) {
	t.Parallel()
	b := setup(t, workspace.PublishPolicy{}, workspace.Limits{})
	b.gh.SetRepoID(repo, 777)
	require.Zero(t, b.job.Job.RepoID)
	b.prepare(t)
}

// GitLab: the project path now holds another project (the delivery's was
// renamed or transferred): refused before the clone; the project token
// minted to ask is revoked. The delivery's project id runs.
func TestGitLabPrepareRefusesAProjectRecreatedUnderTheSamePath(t *testing.T) {
	t.Parallel()
	const project = "acme/platform/web"
	git := forgetest.StartGitServer(t, nil)
	base := git.CreateRepo(t, project, "main", map[string]string{"README.md": "hello\n"})
	gl := forgetest.StartGitLab(t, git)
	gl.AddProject(project, "main")
	var logs bytes.Buffer
	m, err := workspace.New(workspace.Config{
		Forges: map[jobs.Forge]workspace.Forge{jobs.ForgeGitLab: {
			Minter: &token.GitLabProject{URL: gl.URL, Parent: token.New(gl.Parent, time.Time{})},
			API:    &workspace.GitLab{URL: gl.URL},
		}},
		StateDir: t.TempDir(), Host: "h1", Backoff: time.Millisecond,
		Logger: slog.New(slog.NewJSONHandler(&logs, nil)),
	})
	require.NoError(t, err)
	delivered := gl.ProjectID(project)
	job := workspace.Job{ID: "job-7", Job: jobs.Job{Kind: jobs.KindForge, Repo: project, Flow: "fix", Task: "t",
		ForgeEvent: jobs.ForgeEvent{Forge: jobs.ForgeGitLab, RepoID: delivered, Number: 3, Trigger: "fix"}}}
	gl.SetProjectID(project, delivered+99)

	dir := t.TempDir()
	_, err = m.Prepare(context.Background(), job, dir)
	requireRepoIDRefused(t, err, &logs, delivered, delivered+99, append(gl.Tokens(), gl.Parent))
	require.Zero(t, git.Requests(), "nothing cloned or fetched")
	require.Empty(t, git.Passwords(), "git was sent no token")
	requireEmptyDir(t, dir)
	require.Empty(t, gl.Notes(project, "issue/3"), "no note on the other project")
	require.NotEmpty(t, gl.Tokens())
	require.ElementsMatch(t, gl.Tokens(), gl.Revoked(), "the token minted to ask is revoked")

	gl.SetProjectID(project, delivered)
	c, err := m.Prepare(context.Background(), job, t.TempDir())
	require.NoError(t, err)
	defer func() { _ = c.Close() }()
	require.Equal(t, base, c.Base())
}

// The name changes hands while the job runs: publish asks again before it
// writes anything, so the new repository under the name gets no push, no
// pull request and no output, and the job ends repo-gone.
func TestPublishRefusesARepositoryRecreatedDuringTheRun(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	b := setupWith(t, workspace.PublishPolicy{}, workspace.Limits{}, func(c *workspace.Config) {
		c.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
	})
	delivered := b.gh.RepoID(repo)
	b.job.Job.RepoID = delivered
	c := b.prepare(t)
	b.write(t, "src/app.go", "package app\n\nfunc Fixed() {}\n")
	b.write(t, "out/comment.md", "done\n")
	b.gh.SetRepoID(repo, delivered+4242)

	pub, err := c.Publish(context.Background(), completed)
	requireRepoIDRefused(t, err, &logs, delivered, delivered+4242, b.gh.Tokens())
	require.Empty(t, pub.PushedCommit)
	require.Empty(t, pub.PullRequestURL)
	require.Empty(t, b.git.Head(t, repo, "pi/issue-5"), "no branch pushed")
	require.Empty(t, b.gh.Pulls(repo), "no pull request")
	require.Empty(t, b.gh.Comments(repo, 5), "no output posted")
}
