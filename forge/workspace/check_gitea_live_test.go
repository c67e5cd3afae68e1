package workspace_test

import (
	"context"
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

// Against a real Gitea: a bot token with exactly the scopes of
// docs/forges.md and Administrator on the repository passes; a token
// without one of the scopes is named by that scope; a bot with Write is told
// it needs Administrator; a token the forge does not know is refused. The
// checks write nothing.
func TestCheckCredentialsGitea(t *testing.T) {
	t.Parallel()
	g := forgetest.StartGitea(t)
	admin, err := gitea.NewClient(g.URL, gitea.SetToken(g.AdminToken))
	require.NoError(t, err)
	_, _, err = admin.CreateRepo(gitea.CreateRepoOption{Name: "web", AutoInit: true, DefaultBranch: "main", Readme: "Default"})
	require.NoError(t, err)
	repo := g.AdminUser + "/web"
	bot := g.CreateScopedUser(t, "pi-bot")
	g.AddCollaborator(t, repo, bot.Login, "admin")
	writer := g.CreateScopedUser(t, "pi-writer")
	g.AddCollaborator(t, repo, writer.Login, "write")
	documented := []string{"write:repository", "write:issue", "read:user"}

	check := func(t *testing.T, tok string) []workspace.CredentialCheck {
		t.Helper()
		f := workspace.Forge{Minter: token.Static{Token: token.New(tok, time.Time{})}, API: &workspace.Gitea{URL: g.URL}}
		out := workspace.CheckCredentials(context.Background(), jobs.ForgeForgejo, f, []string{repo})
		require.Len(t, out, 2, "%+v", out)
		require.Equal(t, "", out[0].Repo)
		require.Equal(t, repo, out[1].Repo)
		for _, c := range out {
			require.Equal(t, jobs.ForgeForgejo, c.Forge)
			require.NotContains(t, c.Detail+c.Fix, tok, "no secret in a finding")
		}
		return out
	}

	t.Run("Documented", func(t *testing.T) {
		out := check(t, bot.Token(t, "documented", documented...))
		for _, c := range out {
			require.True(t, c.OK, "%+v", c)
			require.False(t, c.Failed())
			require.Empty(t, c.Missing)
		}
		require.Contains(t, out[0].Detail, "read:user, write:issue, write:repository")
		require.Contains(t, out[1].Detail, "pi-bot is Administrator on "+repo)
	})

	t.Run("WithoutWriteIssue", func(t *testing.T) {
		out := check(t, bot.Token(t, "no-issue", "write:repository", "read:user"))
		require.True(t, out[0].Failed(), "%+v", out[0])
		require.Equal(t, []string{"write:issue"}, out[0].Missing)
		require.Contains(t, out[0].Detail, "lacks the scope write:issue")
		require.True(t, out[1].OK, "%+v", out[1])
	})

	t.Run("WithoutWriteRepository", func(t *testing.T) {
		out := check(t, bot.Token(t, "no-repo", "write:issue", "read:user"))
		require.Equal(t, []string{"write:repository"}, out[0].Missing, "%+v", out[0])
		// Without a repository scope the repository cannot be read at all.
		require.True(t, out[1].Failed(), "%+v", out[1])
		require.Equal(t, []string{"read:repository"}, out[1].Missing)
	})

	t.Run("WithoutReadUser", func(t *testing.T) {
		out := check(t, bot.Token(t, "no-user", "write:repository", "write:issue"))
		require.Equal(t, []string{"read:user"}, out[0].Missing, "%+v", out[0])
		require.True(t, out[1].OK, "%+v", out[1])
	})

	t.Run("WriteIsNotAdministrator", func(t *testing.T) {
		out := check(t, writer.Token(t, "documented", documented...))
		require.True(t, out[0].OK, "%+v", out[0])
		require.True(t, out[1].Failed(), "%+v", out[1])
		require.Equal(t, []string{"Administrator on " + repo}, out[1].Missing)
		require.Contains(t, out[1].Detail, "the bot pi-writer needs Administrator on "+repo+" to read collaborators' permissions (it has Write)")
	})

	t.Run("UnknownToken", func(t *testing.T) {
		out := check(t, strings.Repeat("0", 40))
		require.True(t, out[0].Failed(), "%+v", out[0])
		require.Contains(t, out[0].Detail, "refused the token")
		require.True(t, out[1].Unverified, "%+v", out[1])
	})

	// Nothing was written: no repository, no issue, no pull request.
	repos, _, err := admin.ListMyRepos(gitea.ListReposOptions{})
	require.NoError(t, err)
	require.Len(t, repos, 1)
	issues, _, err := admin.ListRepoIssues(g.AdminUser, "web", gitea.ListIssueOption{State: gitea.StateAll})
	require.NoError(t, err)
	require.Empty(t, issues)
	users, _, err := admin.AdminListUsers(gitea.AdminListUsersOptions{})
	require.NoError(t, err)
	for _, u := range users {
		urepos, _, err := admin.ListUserRepos(u.UserName, gitea.ListReposOptions{})
		require.NoError(t, err)
		for _, r := range urepos {
			require.NotContains(t, r.Name, "pidispatch-scope-probe")
		}
	}
}
