package stack_test

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pidispatch/pidispatch/config"
	"github.com/pidispatch/pidispatch/stack"
)

func TestForgeWorkspacesFromEnv(t *testing.T) {
	t.Parallel()
	getenv := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

	m, err := stack.ForgeWorkspacesFromEnv(getenv(nil), "h1", nil, nil)
	require.NoError(t, err)
	require.Nil(t, m, "no forge credential: nothing to publish with")

	key, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)
	keyPath := filepath.Join(t.TempDir(), "app.pem")
	require.NoError(t, os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}), 0o600))
	m, err = stack.ForgeWorkspacesFromEnv(getenv(map[string]string{
		"GITHUB_APP_ID": "1", "GITHUB_APP_INSTALLATION_ID": "2", "GITHUB_APP_PRIVATE_KEY_PATH": keyPath,
		"FORGEJO_URL": "https://code.example", "FORGEJO_TOKEN": "t",
		"GITLAB_URL": "https://gitlab.example", "GITLAB_TOKEN": "t",
	}), "h1", nil, nil)
	require.NoError(t, err)
	require.NotNil(t, m)

	notPEM := filepath.Join(t.TempDir(), "bad.pem")
	require.NoError(t, os.WriteFile(notPEM, []byte("not a key"), 0o600))
	_, err = stack.ForgeWorkspacesFromEnv(getenv(map[string]string{
		"GITHUB_APP_ID": "1", "GITHUB_APP_INSTALLATION_ID": "2", "GITHUB_APP_PRIVATE_KEY_PATH": notPEM,
	}), "h1", nil, nil)
	var pe *config.ConfigError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, "GITHUB_APP_PRIVATE_KEY_PATH", pe.Var)

	_, err = stack.ForgeWorkspacesFromEnv(getenv(map[string]string{"PI_PUBLISH_MAX_FILES": "0"}), "h1", nil, nil)
	require.ErrorAs(t, err, &pe)
}
