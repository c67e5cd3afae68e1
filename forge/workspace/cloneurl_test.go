package workspace_test

import (
	"context"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pidispatch/pidispatch/forge"
	"github.com/pidispatch/pidispatch/forge/forgetest"
	"github.com/pidispatch/pidispatch/forge/token"
	"github.com/pidispatch/pidispatch/forge/workspace"
	"github.com/pidispatch/pidispatch/jobs"
)

// A forge's API that answers a clone URL on another host (a tampered or
// hijacked API, a poisoned proxy) would have the host send the job's token
// there with git: Prepare refuses before any clone, and that host hears
// nothing.
func TestPrepareRefusesCloneURLOnAnotherHost(t *testing.T) {
	t.Parallel()
	b := setup(t, workspace.PublishPolicy{}, workspace.Limits{})
	// The attacker's git server holds the same repository and takes any
	// credential: a clone there would succeed, token and all.
	evil := forgetest.StartGitServer(t, func(string, string) bool { return true })
	evil.CreateRepo(t, repo, "main", map[string]string{"README.md": "evil\n"})
	b.gh.SetCloneURL(repo, evil.CloneURL(repo))

	_, err := b.m.Prepare(context.Background(), b.job, b.dir)
	require.ErrorIs(t, err, forge.ErrCloneURL)
	require.ErrorContains(t, err, "is not the forge's")
	require.Zero(t, evil.Requests(), "the other host heard nothing")
	require.Empty(t, evil.Passwords(), "no token went there")
	requireEmptyDir(t, b.dir)
}

// An https forge whose API answers an http clone URL (same host and port)
// would have git send the token in the clear: refused before any clone.
func TestPrepareRefusesHTTPCloneURLOnHTTPSForge(t *testing.T) {
	t.Parallel()
	b := setup(t, workspace.PublishPolicy{}, workspace.Limits{})
	// The forge is configured on https; the API calls reach the double
	// (plain http on loopback) through a transport that only swaps the scheme.
	apiURL := "https://" + strings.TrimPrefix(b.gh.URL, "http://")
	hc := &http.Client{Transport: toHTTP{}, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	m, err := workspace.New(workspace.Config{
		Forges: map[jobs.Forge]workspace.Forge{jobs.ForgeGitHub: {
			Minter: &token.GitHubApp{AppID: 42, InstallationID: 7, Key: key(t), APIURL: apiURL, HTTPClient: hc},
			API:    &workspace.GitHub{APIURL: apiURL, HTTPClient: hc},
		}},
		StateDir: b.state, Host: "h1", Backoff: time.Millisecond,
	})
	require.NoError(t, err)
	// The double's own http URL: a clone there works, over http.
	b.gh.SetCloneURL(repo, b.gh.CloneURL(repo))
	before := len(b.git.Passwords())

	_, err = m.Prepare(context.Background(), b.job, b.dir)
	require.ErrorIs(t, err, forge.ErrCloneURL)
	require.ErrorContains(t, err, "http while the forge is https")
	require.Len(t, b.git.Passwords(), before, "no token went over http")
	requireEmptyDir(t, b.dir)
}

// toHTTP sends an https request as http to the same address.
type toHTTP struct{}

func (toHTTP) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.URL.Scheme = "http"
	return http.DefaultTransport.RoundTrip(r)
}

func requireEmptyDir(t *testing.T, dir string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Empty(t, entries, "nothing cloned")
}

// GitHub serves git on github.com for api.github.com, on <tenant>.ghe.com
// for api.<tenant>.ghe.com, on a GitHub Enterprise Server's own host, and
// for any other API URL on that URL's own host.
func TestGitHubForgeURL(t *testing.T) {
	t.Parallel()
	for api, want := range map[string]string{
		"":                                "https://github.com",
		"https://api.github.com/":         "https://github.com",
		"https://api.acme.ghe.com":        "https://acme.ghe.com",
		"https://ghe.example/api/v3/":     "https://ghe.example",
		"https://ghe.example:8443/api/v3": "https://ghe.example:8443",
		"http://127.0.0.1:5555/":          "http://127.0.0.1:5555",
		"https://api.proxy.example/gh/":   "https://api.proxy.example",
	} {
		require.Equal(t, want, (&workspace.GitHub{APIURL: api}).ForgeURL(), api)
	}
	require.Equal(t, "https://gitlab.example", (&workspace.GitLab{URL: "https://gitlab.example"}).ForgeURL())
	require.Equal(t, "http://forgejo.lan:3000", (&workspace.Gitea{URL: "http://forgejo.lan:3000"}).ForgeURL())
}
