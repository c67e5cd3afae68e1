package workspace_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-github/v84/github"
	"github.com/stretchr/testify/require"
	gitlab "gitlab.com/gitlab-org/api/client-go/v2"

	"github.com/pidispatch/pidispatch/forge/forgetest"
	"github.com/pidispatch/pidispatch/forge/token"
	"github.com/pidispatch/pidispatch/forge/workspace"
	"github.com/pidispatch/pidispatch/jobs"
)

// findings indexes a check's findings by repository ("" the credential).
func findings(t *testing.T, out []workspace.CredentialCheck, forge jobs.Forge) map[string]workspace.CredentialCheck {
	t.Helper()
	m := map[string]workspace.CredentialCheck{}
	for _, c := range out {
		require.Equal(t, forge, c.Forge)
		_, dup := m[c.Repo]
		require.False(t, dup, "two findings for %q: %+v", c.Repo, out)
		m[c.Repo] = c
	}
	return m
}

func githubAppForge(gh *forgetest.GitHub, t *testing.T) workspace.Forge {
	return workspace.Forge{
		Minter: &token.GitHubApp{AppID: 42, InstallationID: 7, Key: key(t), APIURL: gh.URL},
		API:    &workspace.GitHub{APIURL: gh.URL},
	}
}

// A GitHub App: the installation's permissions are compared with the four
// publishing needs, each one missing named; each repository gets a token
// restricted to it and to metadata, revoked at once, and one outside the
// installation is named.
func TestCheckCredentialsGitHubApp(t *testing.T) {
	t.Parallel()
	const other = "acme/api"
	start := func(t *testing.T) *forgetest.GitHub {
		git := forgetest.StartGitServer(t, nil)
		gh := forgetest.StartGitHub(t, git, 42, &key(t).PublicKey, time.Hour)
		gh.AddRepo(repo, "main")
		gh.AddRepo(other, "main")
		return gh
	}

	t.Run("Documented", func(t *testing.T) {
		t.Parallel()
		gh := start(t)
		gh.SetInstallation("acme", token.PublishPermissions(), repo, other)
		got := findings(t, workspace.CheckCredentials(context.Background(), jobs.ForgeGitHub, githubAppForge(gh, t), []string{repo, other, repo}), jobs.ForgeGitHub)
		require.Len(t, got, 3)
		for _, c := range got {
			require.True(t, c.OK, "%+v", c)
		}
		require.Contains(t, got[""].Detail, "metadata: read, contents: write, issues: write, pull requests: write")
		mints := gh.Mints()
		require.Len(t, mints, 2)
		for _, m := range mints {
			require.Len(t, m.Repositories, 1)
			require.Equal(t, &github.InstallationPermissions{Metadata: github.Ptr("read")}, m.Permissions)
		}
		require.Len(t, gh.Revoked(), 2, "each token the check minted is revoked")
	})

	t.Run("MissingPermissionsAndRepository", func(t *testing.T) {
		t.Parallel()
		gh := start(t)
		gh.SetInstallation("acme", &github.InstallationPermissions{Metadata: github.Ptr("read"), Contents: github.Ptr("read"),
			Issues: github.Ptr("write")}, repo)
		got := findings(t, workspace.CheckCredentials(context.Background(), jobs.ForgeGitHub, githubAppForge(gh, t),
			[]string{repo, other, "someone/else"}), jobs.ForgeGitHub)
		require.True(t, got[""].Failed(), "%+v", got[""])
		require.Equal(t, []string{"contents: write", "pull requests: write"}, got[""].Missing)
		require.Contains(t, got[""].Detail, "lacks contents: write, pull requests: write")
		require.NotEmpty(t, got[""].Fix)
		require.True(t, got[repo].OK, "%+v", got[repo])
		require.Equal(t, []string{"installation on " + other}, got[other].Missing)
		require.Contains(t, got[other].Detail, "not installed on "+other)
		require.Equal(t, []string{"installation on someone/else"}, got["someone/else"].Missing, "another account's repository")
	})

	t.Run("WrongKey", func(t *testing.T) {
		t.Parallel()
		gh := start(t)
		f := githubAppForge(gh, t)
		f.Minter.(*token.GitHubApp).AppID = 43 // the key is not this App's
		got := findings(t, workspace.CheckCredentials(context.Background(), jobs.ForgeGitHub, f, []string{repo}), jobs.ForgeGitHub)
		require.True(t, got[""].Failed(), "%+v", got[""])
		require.Contains(t, got[""].Detail, "refused the App's token")
		require.True(t, got[repo].Unverified)
	})

	t.Run("Unanswered", func(t *testing.T) {
		t.Parallel()
		gh := start(t)
		gh.Fail("GET", "/app/installations/", 503, 1, false)
		got := findings(t, workspace.CheckCredentials(context.Background(), jobs.ForgeGitHub, githubAppForge(gh, t), []string{repo}), jobs.ForgeGitHub)
		require.True(t, got[""].Unverified, "%+v", got[""])
		require.False(t, got[""].Failed())
	})
}

// A GitHub personal token: a classic token must have the repo scope, a
// fine-grained one cannot be read (said, not failed), and its user must be
// able to push to each repository.
func TestCheckCredentialsGitHubToken(t *testing.T) {
	t.Parallel()
	git := forgetest.StartGitServer(t, nil)
	gh := forgetest.StartGitHub(t, git, 42, &key(t).PublicKey, time.Hour)
	gh.AddRepo(repo, "main")
	gh.AddRepo("acme/api", "main")
	gh.AddClassicPAT("ghp_full", "pi-bot", "repo, read:org", repo)
	gh.AddClassicPAT("ghp_public", "pi-bot", "public_repo", repo)
	gh.AddFineGrainedPAT("github_pat_fine", "pi-bot", repo)
	check := func(tok string, repos ...string) map[string]workspace.CredentialCheck {
		f := workspace.Forge{Minter: token.Static{Token: token.New(tok, time.Time{})}, API: &workspace.GitHub{APIURL: gh.URL}}
		return findings(t, workspace.CheckCredentials(context.Background(), jobs.ForgeGitHub, f, repos), jobs.ForgeGitHub)
	}

	got := check("ghp_full", repo)
	require.True(t, got[""].OK, "%+v", got[""])
	require.True(t, got[repo].OK, "%+v", got[repo])

	got = check("ghp_public", repo)
	require.Equal(t, []string{"repo"}, got[""].Missing, "%+v", got[""])
	require.Contains(t, got[""].Detail, "without the repo scope (it has public_repo)")

	got = check("github_pat_fine", repo, "acme/api", "acme/gone")
	require.True(t, got[""].Unverified, "%+v", got[""])
	require.Contains(t, got[""].Detail, "fine-grained")
	require.True(t, got[repo].OK, "%+v", got[repo])
	require.Equal(t, []string{"Write on acme/api"}, got["acme/api"].Missing, "%+v", got["acme/api"])
	require.Equal(t, []string{"access to acme/gone"}, got["acme/gone"].Missing, "%+v", got["acme/gone"])

	got = check("ghp_unknown", repo)
	require.True(t, got[""].Failed(), "%+v", got[""])
	require.Contains(t, got[""].Detail, "refused the token")
	for _, c := range got {
		require.NotContains(t, c.Detail+c.Fix, "ghp_unknown")
	}
}

// GitLab: the token must have api, and be a Maintainer (or more) of each
// project, directly or through a group.
func TestCheckCredentialsGitLab(t *testing.T) {
	t.Parallel()
	const project, other = "acme/platform/web", "acme/api"
	git := forgetest.StartGitServer(t, nil)
	gl := forgetest.StartGitLab(t, git)
	gl.AddProject(project, "main")
	gl.AddProject(other, "main")
	gl.SetMember(project, forgetest.ParentUser, gitlab.MaintainerPermissions)
	gl.SetMember(other, forgetest.ParentUser, gitlab.DeveloperPermissions)
	f := workspace.Forge{Minter: &token.GitLabProject{URL: gl.URL, Parent: token.New(gl.Parent, time.Time{})}, API: &workspace.GitLab{URL: gl.URL}}
	check := func(repos ...string) map[string]workspace.CredentialCheck {
		return findings(t, workspace.CheckCredentials(context.Background(), jobs.ForgeGitLab, f, repos), jobs.ForgeGitLab)
	}

	got := check(project, other, "acme/gone")
	require.True(t, got[""].OK, "%+v", got[""])
	require.True(t, got[project].OK, "%+v", got[project])
	require.Contains(t, got[project].Detail, "Maintainer of "+project)
	require.Equal(t, []string{"Maintainer of " + other}, got[other].Missing, "%+v", got[other])
	require.Contains(t, got[other].Detail, "is Developer of "+other)
	require.Equal(t, []string{"Maintainer of acme/gone"}, got["acme/gone"].Missing, "%+v", got["acme/gone"])

	gl.SetParentScopes("read_api", "write_repository")
	got = check(project)
	require.Equal(t, []string{"api"}, got[""].Missing, "%+v", got[""])
	require.Contains(t, got[""].Detail, "lacks the scope api (it has read_api, write_repository)")

	gl.SetParentScopes("read_repository")
	got = check(project)
	require.Equal(t, []string{"api"}, got[""].Missing, "%+v", got[""])
	require.True(t, got[project].OK, "%+v", got[project])
}

// Manager.CheckCredentials checks each forge it holds, in the order of
// their kinds, with each forge's repositories.
func TestManagerCheckCredentials(t *testing.T) {
	t.Parallel()
	git := forgetest.StartGitServer(t, nil)
	gh := forgetest.StartGitHub(t, git, 42, &key(t).PublicKey, time.Hour)
	gh.AddRepo(repo, "main")
	gl := forgetest.StartGitLab(t, git)
	gl.AddProject("acme/platform/web", "main")
	gl.SetMember("acme/platform/web", forgetest.ParentUser, gitlab.OwnerPermissions)
	m, err := workspace.New(workspace.Config{
		Forges: map[jobs.Forge]workspace.Forge{
			jobs.ForgeGitHub: githubAppForge(gh, t),
			jobs.ForgeGitLab: {Minter: &token.GitLabProject{URL: gl.URL, Parent: token.New(gl.Parent, time.Time{})}, API: &workspace.GitLab{URL: gl.URL}},
		},
		StateDir: t.TempDir(),
	})
	require.NoError(t, err)
	out := m.CheckCredentials(context.Background(), map[jobs.Forge][]string{jobs.ForgeGitHub: {repo}, jobs.ForgeGitLab: {"acme/platform/web"}})
	require.Len(t, out, 4)
	require.Equal(t, []jobs.Forge{jobs.ForgeGitHub, jobs.ForgeGitHub, jobs.ForgeGitLab, jobs.ForgeGitLab},
		[]jobs.Forge{out[0].Forge, out[1].Forge, out[2].Forge, out[3].Forge})
	for _, c := range out {
		require.True(t, c.OK, "%+v", c)
	}
	require.Contains(t, out[3].Detail, "Owner of acme/platform/web")
}
