package config

import (
	"errors"
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
	assert.Equal(t, "https://api.github.com", f.GitHubAPIURL)
	assert.Equal(t, "https://gitlab.com", f.GitLabURL)
	assert.Equal(t, 60*time.Second, f.PollInterval)
	assert.Empty(t, f.GitHubAuthSource)
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
	assert.Equal(t, "pat", f.GitHubAuthSource, "a PAT alone picks pat")
	assert.Equal(t, "127.0.0.1:8088", f.ReceiverAddr())
	assert.Equal(t, "https://ghe.example/api/v3", f.GitHubAPIURL)
	assert.Equal(t, []string{"acme/api", "acme/web"}, f.PollRepos)
	assert.Equal(t, 30*time.Second, f.PollInterval)
	assert.Equal(t, "https://codeberg.org", f.ForgejoURL)
	s := f.String()
	for _, secret := range []string{"s3cret", "ghp_x", "glpat", "whsec_AAAA"} {
		assert.NotContains(t, s, secret)
	}
}

func TestLoadForgeApp(t *testing.T) {
	base := map[string]string{"GITHUB_AUTH_SOURCE": "app", "GITHUB_APP_ID": "12", "GITHUB_APP_INSTALLATION_ID": "34",
		"GITHUB_APP_PRIVATE_KEY_PATH": "/etc/pi/app.pem"}
	f, err := LoadForge(forgeEnv(base))
	require.NoError(t, err)
	assert.Equal(t, int64(12), f.GitHubAppID)
	assert.Equal(t, int64(34), f.GitHubAppInstallationID)
}

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
		var fe *ForgeError
		require.True(t, errors.As(err, &fe), "%v: %v", c.vars, err)
		assert.Equal(t, c.variable, fe.Var, "%v", c.vars)
		assert.Contains(t, fe.Rule, c.rule, "%v", c.vars)
		for _, v := range c.vars {
			if len(v) > 3 {
				assert.False(t, strings.Contains(err.Error(), "pw@"), "no credential echoed")
			}
		}
	}
}
