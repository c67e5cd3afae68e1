package stack_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pidispatch/pidispatch/config"
	"github.com/pidispatch/pidispatch/stack"
)

// intakeEnv is a receiver's environment against a GitHub API double; Valkey
// is never dialled at Build.
func intakeEnv(t *testing.T, spool string) map[string]string {
	t.Helper()
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"id":999,"login":"pi-bot"}`)
	}))
	t.Cleanup(api.Close)
	triggers := filepath.Join(t.TempDir(), "triggers.json")
	require.NoError(t, os.WriteFile(triggers, []byte(`{"triggers": [{"on": {"type": "comment", "id": "c",
	  "repos": ["acme/api"], "phrase": "/pi"}, "run": {"kind": "github", "flow": "fix"}}]}`), 0o600))
	return map[string]string{
		"PI_ENV_FILE": "/dev/null", "VALKEY_URL": "redis://127.0.0.1:1/0", "PI_UNSIGNED_QUEUES": "*", "PI_TRIGGERS_FILE": triggers,
		"WEBHOOK_SECRET": "s", "GITHUB_PAT": "ghp_x", "GITHUB_API_URL": api.URL,
		"RECEIVER_BIND": "127.0.0.1", "RECEIVER_PORT": strconv.Itoa(freePort(t)), "RECEIVER_SPOOL_DIR": spool,
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

func buildIntake(t *testing.T, env map[string]string) (*stack.Intake, error) {
	t.Helper()
	getenv := func(k string) string { return env[k] }
	cfg, err := config.Load(getenv)
	require.NoError(t, err)
	fc, err := config.LoadForge(getenv)
	require.NoError(t, err)
	return stack.BuildIntake(context.Background(), cfg, fc, slog.New(slog.NewJSONHandler(io.Discard, nil)))
}

// The receiver's intake wires the inbox: its spool folder is created and
// held (a second receiver on the folder refuses to boot, naming the
// variable, until the first closes), and its metrics are on /metrics.
func TestBuildIntakeWiresTheInbox(t *testing.T) {
	spool := filepath.Join(t.TempDir(), "spool")
	env := intakeEnv(t, spool)
	in, err := buildIntake(t, env)
	require.NoError(t, err)
	require.NotNil(t, in.Inbox)
	require.NotNil(t, in.Receiver)
	assert.Equal(t, spool, in.Inbox.Spool().Dir())
	info, err := os.Stat(spool)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o700), info.Mode().Perm())

	_, err = buildIntake(t, env)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "RECEIVER_SPOOL_DIR")
	assert.Contains(t, err.Error(), "in use by another receiver")

	srv := httptest.NewServer(in.Receiver.Handler())
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/metrics")
	require.NoError(t, err)
	text, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, m := range []string{"pidispatch_receiver_spool_bytes 0", "pidispatch_receiver_spool_files 0"} {
		assert.True(t, strings.Contains(string(text), m), m)
	}

	in.Close()
	again, err := buildIntake(t, env)
	require.NoError(t, err, "the folder is free once the first intake closed")
	again.Close()
}

// A poller alone serves no webhook, so it has no inbox and no spool.
func TestBuildIntakePollOnlyHasNoInbox(t *testing.T) {
	spool := filepath.Join(t.TempDir(), "spool")
	env := intakeEnv(t, spool)
	env["WEBHOOK_SECRET"], env["POLL_REPOS"] = "", "acme/api"
	in, err := buildIntake(t, env)
	require.NoError(t, err)
	defer in.Close()
	assert.Nil(t, in.Inbox)
	assert.Nil(t, in.Receiver)
	_, err = os.Stat(spool)
	assert.ErrorIs(t, err, os.ErrNotExist)
}

// A receiver without the fleet key could queue only jobs every worker
// refuses: it refuses to boot, naming the variable and the opt-in, unless
// the shared queue takes unsigned jobs.
func TestBuildIntakeWithoutAFleetKey(t *testing.T) {
	env := intakeEnv(t, filepath.Join(t.TempDir(), "spool"))
	delete(env, "PI_UNSIGNED_QUEUES")
	_, err := buildIntake(t, env)
	var ce *config.ConfigError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, "PI_FLEET_KEY_FILE", ce.Var)
	assert.Contains(t, ce.Rule, "PI_UNSIGNED_QUEUES")

	keyFile := filepath.Join(t.TempDir(), "fleet.key")
	require.NoError(t, os.WriteFile(keyFile, []byte("a receiver's fleet key, 32 bytes or more"), 0o600))
	for _, extra := range []map[string]string{{"PI_FLEET_KEY_FILE": keyFile}, {"PI_UNSIGNED_QUEUES": "pi-jobs"}} {
		env := intakeEnv(t, filepath.Join(t.TempDir(), "spool"))
		delete(env, "PI_UNSIGNED_QUEUES")
		for k, v := range extra {
			env[k] = v
		}
		in, err := buildIntake(t, env)
		require.NoError(t, err, "%v", extra)
		in.Close()
	}
}
