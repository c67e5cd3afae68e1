package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func forgeEnv(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestLoadForgeDefaults(t *testing.T) {
	f, err := LoadForge(forgeEnv(nil))
	require.NoError(t, err)
	assert.Equal(t, "0.0.0.0:3000", f.ReceiverAddr())
	assert.Equal(t, "https://api.github.com", f.Credentials.GitHubAPIURL)
	assert.Equal(t, "https://gitlab.com", f.Credentials.GitLabURL)
	assert.Equal(t, 60*time.Second, f.PollInterval)
	assert.Nil(t, f.Credentials.GitHub)
	assert.Nil(t, f.Credentials.GitLab)
	assert.Nil(t, f.Credentials.Forgejo)
}

func TestLoadForgeFull(t *testing.T) {
	f, err := LoadForge(forgeEnv(map[string]string{
		"WEBHOOK_SECRET": "s3cret", "RECEIVER_BIND": "127.0.0.1", "RECEIVER_PORT": "8088",
		"GITHUB_PAT": "ghp_x", "GITHUB_API_URL": "https://ghe.example/api/v3/",
		"POLL_REPOS": "acme/web, acme/api,acme/web", "POLL_INTERVAL_SECONDS": "30",
		"GITLAB_URL": "https://gitlab.example", "GITLAB_TOKEN": "glpat", "GITLAB_WEBHOOK_MODE": "signature", "GITLAB_WEBHOOK_SECRET": "whsec_AAAA",
		"FORGEJO_URL": "https://codeberg.org/", "FORGEJO_TOKEN": "t", "FORGEJO_WEBHOOK_SECRET": "f",
	}))
	require.NoError(t, err)
	require.NotNil(t, f.Credentials.GitHub)
	assert.Equal(t, GitHubAuthPAT, f.Credentials.GitHub.Source, "a PAT alone picks pat")
	assert.Equal(t, "ghp_x", f.Credentials.GitHub.PAT.Reveal())
	assert.Equal(t, "127.0.0.1:8088", f.ReceiverAddr())
	assert.Equal(t, "https://ghe.example/api/v3", f.Credentials.GitHubAPIURL)
	assert.Equal(t, "https://ghe.example/api/v3", f.Credentials.GitHub.APIURL)
	assert.Equal(t, "https://gitlab.example", f.Credentials.GitLab.URL)
	assert.Equal(t, []string{"acme/api", "acme/web"}, f.PollRepos)
	assert.Equal(t, 30*time.Second, f.PollInterval)
	assert.Equal(t, "https://codeberg.org", f.Credentials.Forgejo.URL)
	s := f.String()
	for _, secret := range []string{"s3cret", "ghp_x", "glpat", "whsec_AAAA"} {
		assert.NotContains(t, s, secret)
	}
}

func TestLoadForgeApp(t *testing.T) {
	key := filepath.Join(t.TempDir(), "app.pem")
	require.NoError(t, os.WriteFile(key, []byte("not a key"), 0o600))
	// GITHUB_AUTH_SOURCE unset with an App id: app, for the receiver and the
	// worker alike (one parser).
	base := map[string]string{"GITHUB_APP_ID": "12", "GITHUB_APP_INSTALLATION_ID": "34", "GITHUB_APP_PRIVATE_KEY_PATH": key}
	f, err := LoadForge(forgeEnv(base))
	require.NoError(t, err)
	gh := f.Credentials.GitHub
	require.NotNil(t, gh)
	assert.Equal(t, GitHubAuthApp, gh.Source)
	assert.Equal(t, int64(12), gh.AppID)
	assert.Equal(t, int64(34), gh.InstallationID)
	c, err := LoadForgeCredentials(forgeEnv(base))
	require.NoError(t, err)
	assert.Equal(t, f.Credentials, c)

	// The key file is read on demand; a file that is no key is named.
	_, err = gh.PrivateKey()
	var ce *ConfigError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, "GITHUB_APP_PRIVATE_KEY_PATH", ce.Var)
	assert.Contains(t, ce.Rule, "RSA private key")
	assert.NotContains(t, err.Error(), "not a key")
}

func TestLoadForgeCredentialsDefaults(t *testing.T) {
	// A GitLab token alone is gitlab.com's.
	c, err := LoadForgeCredentials(forgeEnv(map[string]string{"GITLAB_TOKEN": "glpat"}))
	require.NoError(t, err)
	require.NotNil(t, c.GitLab)
	assert.Equal(t, DefaultGitLabURL, c.GitLab.URL)
	assert.Equal(t, "glpat", c.GitLab.Token.Reveal())
	assert.NotContains(t, fmt.Sprintf("%+v %v %#v %s", *c.GitLab, c, c.GitLab.Token, c.GitLab.Token), "glpat", "a token never prints")
	js, err := json.Marshal(c)
	require.NoError(t, err)
	assert.NotContains(t, string(js), "glpat")
	var logged strings.Builder
	slog.New(slog.NewJSONHandler(&logged, nil)).Info("x", "token", c.GitLab.Token)
	assert.NotContains(t, logged.String(), "glpat")
}

var credentialVars = []string{"GITHUB_AUTH_SOURCE", "GITHUB_PAT", "GITHUB_APP_ID", "GITHUB_APP_INSTALLATION_ID",
	"GITHUB_APP_PRIVATE_KEY_PATH", "GITHUB_API_URL", "GITLAB_URL", "GITLAB_TOKEN", "FORGEJO_URL", "FORGEJO_TOKEN"}

func TestLoadForgeRefusals(t *testing.T) {
	for _, c := range []struct {
		vars     map[string]string
		variable string
		rule     string
	}{
		{map[string]string{"RECEIVER_PORT": "0"}, "RECEIVER_PORT", "1 to 65535"},
		{map[string]string{"RECEIVER_PORT": "http"}, "RECEIVER_PORT", "port number"},
		{map[string]string{"RECEIVER_BIND": "example.com"}, "RECEIVER_BIND", "IP address"},
		{map[string]string{"GITHUB_AUTH_SOURCE": "gh"}, "GITHUB_AUTH_SOURCE", "not supported"},
		{map[string]string{"GITHUB_AUTH_SOURCE": "oauth"}, "GITHUB_AUTH_SOURCE", "app or pat"},
		{map[string]string{"GITHUB_AUTH_SOURCE": "pat"}, "GITHUB_PAT", "required"},
		{map[string]string{"GITHUB_AUTH_SOURCE": "app", "GITHUB_APP_ID": "x"}, "GITHUB_APP_ID", "positive integer"},
		{map[string]string{"GITHUB_AUTH_SOURCE": "app", "GITHUB_APP_ID": "1", "GITHUB_APP_INSTALLATION_ID": "2"}, "GITHUB_APP_PRIVATE_KEY_PATH", "required"},
		{map[string]string{"GITHUB_AUTH_SOURCE": "app", "GITHUB_APP_ID": "1", "GITHUB_APP_INSTALLATION_ID": "2", "GITHUB_APP_PRIVATE_KEY_PATH": "key.pem"}, "GITHUB_APP_PRIVATE_KEY_PATH", "absolute"},
		{map[string]string{"GITHUB_APP_ID": "1", "GITHUB_APP_INSTALLATION_ID": "2", "GITHUB_APP_PRIVATE_KEY_PATH": "/nonexistent/key.pem"}, "GITHUB_APP_PRIVATE_KEY_PATH", "readable file"},
		{map[string]string{"GITHUB_APP_ID": "1"}, "GITHUB_APP_INSTALLATION_ID", "positive integer"},
		{map[string]string{"GITHUB_APP_ID": "x"}, "GITHUB_APP_ID", "positive integer"},
		{map[string]string{"GITLAB_URL": "https://gitlab.example"}, "GITLAB_TOKEN", "required with GITLAB_URL"},
		{map[string]string{"FORGEJO_TOKEN": "secret-value"}, "FORGEJO_URL", "required"},
		{map[string]string{"FORGEJO_URL": "https://code.example"}, "FORGEJO_TOKEN", "required"},
		{map[string]string{"FORGEJO_TOKEN": "secret-value", "FORGEJO_URL": "ftp://x"}, "FORGEJO_URL", "http(s) URL"},
		{map[string]string{"GITHUB_API_URL": "ftp://x"}, "GITHUB_API_URL", "http(s) URL"},
		{map[string]string{"GITHUB_API_URL": "https://user:pw@ghe.example"}, "GITHUB_API_URL", "without credentials"},
		{map[string]string{"GITHUB_PAT": "x", "POLL_REPOS": "acme"}, "POLL_REPOS", `"acme" is not owner/name`},
		{map[string]string{"GITHUB_PAT": "x", "POLL_INTERVAL_SECONDS": "29"}, "POLL_INTERVAL_SECONDS", "from 30"},
		{map[string]string{"POLL_REPOS": "a/b"}, "GITHUB_AUTH_SOURCE", "required with POLL_REPOS"},
		{map[string]string{"WEBHOOK_SECRET": "x"}, "GITHUB_AUTH_SOURCE", "required with WEBHOOK_SECRET"},
		{map[string]string{"GITLAB_WEBHOOK_SECRET": "x", "GITLAB_TOKEN": "t"}, "GITLAB_WEBHOOK_MODE", "required"},
		{map[string]string{"GITLAB_WEBHOOK_MODE": "basic"}, "GITLAB_WEBHOOK_MODE", "token or signature"},
		{map[string]string{"GITLAB_WEBHOOK_MODE": "token"}, "GITLAB_WEBHOOK_SECRET", "required"},
		{map[string]string{"GITLAB_WEBHOOK_MODE": "token", "GITLAB_WEBHOOK_SECRET": "x"}, "GITLAB_TOKEN", "required"},
		{map[string]string{"FORGEJO_WEBHOOK_SECRET": "x"}, "FORGEJO_URL", "required"},
	} {
		_, err := LoadForge(forgeEnv(c.vars))
		var fe *ConfigError
		require.True(t, errors.As(err, &fe), "%v: %v", c.vars, err)
		assert.Equal(t, c.variable, fe.Var, "%v", c.vars)
		assert.Contains(t, fe.Rule, c.rule, "%v", c.vars)
		assert.False(t, strings.Contains(err.Error(), "pw@"), "no credential echoed")
		assert.NotContains(t, err.Error(), "secret-value", "no token echoed")
		credsOnly := true
		for k := range c.vars {
			credsOnly = credsOnly && slices.Contains(credentialVars, k)
		}
		if credsOnly {
			// The credential variables alone refuse the same way for the worker.
			_, err2 := LoadForgeCredentials(forgeEnv(c.vars))
			assert.Equal(t, err, err2, "%v", c.vars)
		}
	}
}
