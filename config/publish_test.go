package config_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pidispatch/pidispatch/config"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestLoadPublish(t *testing.T) {
	t.Parallel()
	p, err := config.LoadPublish(env(nil))
	require.NoError(t, err)
	require.Equal(t, config.Publish{MaxFiles: config.PublishMaxFilesDefault, MaxBytes: config.PublishMaxBytesDefault}, p)

	p, err = config.LoadPublish(env(map[string]string{"PI_PUBLISH_MAX_FILES": "7", "PI_PUBLISH_MAX_BYTES": "1024"}))
	require.NoError(t, err)
	require.Equal(t, config.Publish{MaxFiles: 7, MaxBytes: 1024}, p)

	for k, v := range map[string]string{"PI_PUBLISH_MAX_FILES": "0", "PI_PUBLISH_MAX_BYTES": "-1"} {
		_, err := config.LoadPublish(env(map[string]string{k: v}))
		var pe *config.PublishError
		require.ErrorAs(t, err, &pe)
		require.Equal(t, k, pe.Var)
	}
	_, err = config.LoadPublish(env(map[string]string{"PI_PUBLISH_MAX_FILES": "lots"}))
	require.Error(t, err)
}

func TestLoadPublishForges(t *testing.T) {
	t.Parallel()
	key := filepath.Join(t.TempDir(), "app.pem")
	require.NoError(t, os.WriteFile(key, []byte("pem"), 0o600))

	f, err := config.LoadPublishForges(env(nil))
	require.NoError(t, err)
	require.Nil(t, f.GitHub)
	require.Nil(t, f.GitLab)

	f, err = config.LoadPublishForges(env(map[string]string{
		"GITHUB_APP_ID": "12", "GITHUB_APP_INSTALLATION_ID": "34", "GITHUB_APP_PRIVATE_KEY_PATH": key,
		"GITHUB_API_URL": "https://ghe.example/api/v3",
		"FORGEJO_URL":    "https://code.example/", "FORGEJO_TOKEN": "fj-secret",
	}))
	require.NoError(t, err)
	require.Equal(t, config.GitHubAuthApp, f.GitHub.Source)
	require.EqualValues(t, 12, f.GitHub.AppID)
	require.EqualValues(t, 34, f.GitHub.InstallationID)
	require.Equal(t, "https://code.example", f.Forgejo.URL)
	require.Equal(t, "fj-secret", f.Forgejo.Token.Reveal())
	require.NotContains(t, fmt.Sprintf("%+v", *f.Forgejo), "fj-secret")

	f, err = config.LoadPublishForges(env(map[string]string{"GITHUB_PAT": "ghp_x", "GITLAB_URL": "https://gitlab.example", "GITLAB_TOKEN": "glpat"}))
	require.NoError(t, err)
	require.Equal(t, config.GitHubAuthPAT, f.GitHub.Source)
	require.Equal(t, "ghp_x", f.GitHub.PAT.Reveal())
	require.NotNil(t, f.GitLab)

	for name, tc := range map[string]struct {
		env map[string]string
		bad string
	}{
		"UnknownSource":    {map[string]string{"GITHUB_AUTH_SOURCE": "gh"}, "GITHUB_AUTH_SOURCE"},
		"PATMissing":       {map[string]string{"GITHUB_AUTH_SOURCE": "pat"}, "GITHUB_PAT"},
		"AppIDBad":         {map[string]string{"GITHUB_APP_ID": "x"}, "GITHUB_APP_ID"},
		"InstallMissing":   {map[string]string{"GITHUB_APP_ID": "1"}, "GITHUB_APP_INSTALLATION_ID"},
		"KeyMissing":       {map[string]string{"GITHUB_APP_ID": "1", "GITHUB_APP_INSTALLATION_ID": "2", "GITHUB_APP_PRIVATE_KEY_PATH": "/nonexistent/key.pem"}, "GITHUB_APP_PRIVATE_KEY_PATH"},
		"APIURLWithCreds":  {map[string]string{"GITHUB_PAT": "x", "GITHUB_API_URL": "https://u:p@ghe.example"}, "GITHUB_API_URL"},
		"GitLabNoToken":    {map[string]string{"GITLAB_URL": "https://gitlab.example"}, "GITLAB_TOKEN"},
		"ForgejoNoURL":     {map[string]string{"FORGEJO_TOKEN": "secret-value"}, "FORGEJO_URL"},
		"ForgejoBadScheme": {map[string]string{"FORGEJO_TOKEN": "secret-value", "FORGEJO_URL": "ftp://x"}, "FORGEJO_URL"},
	} {
		_, err := config.LoadPublishForges(env(tc.env))
		var pe *config.PublishError
		require.ErrorAs(t, err, &pe, name)
		require.Equal(t, tc.bad, pe.Var, name)
		require.NotContains(t, err.Error(), "secret-value", name)
	}
}
