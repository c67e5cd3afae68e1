package config

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestLoadForgeInboxDefaults(t *testing.T) {
	f, err := LoadForge(forgeEnv(map[string]string{"HOME": "/home/op"}))
	require.NoError(t, err)
	assert.Equal(t, time.Second, f.StoreTimeout)
	assert.Equal(t, "/home/op/.local/state/pidispatch/receiver-spool", f.SpoolDir)
	assert.Equal(t, int64(256<<20), f.SpoolMax)
	assert.Equal(t, 10000, f.InboxMax)
	assert.False(t, f.SpoolVolatile)
	f, err = LoadForge(forgeEnv(nil))
	require.NoError(t, err)
	assert.True(t, f.SpoolVolatile, "under the temporary folder")
	f, err = LoadForge(forgeEnv(map[string]string{"RECEIVER_SPOOL_DIR": "/tmp/spool"}))
	require.NoError(t, err)
	assert.False(t, f.SpoolVolatile, "the operator's choice")

	for env, want := range map[string]string{
		"XDG_STATE_HOME=/srv/state": "/srv/state/pidispatch/receiver-spool",
		"XDG_STATE_HOME=state":      "/home/op/.local/state/pidispatch/receiver-spool",
	} {
		k, v, _ := strings.Cut(env, "=")
		assert.Equal(t, want, DefaultSpoolDir(forgeEnv(map[string]string{k: v, "HOME": "/home/op"})), env)
	}
	assert.Equal(t, "/tmp/pi-dispatch/receiver-spool", DefaultSpoolDir(forgeEnv(nil)))
}

func TestLoadForgeInboxValues(t *testing.T) {
	f, err := LoadForge(forgeEnv(map[string]string{
		"RECEIVER_STORE_TIMEOUT": "750ms", "RECEIVER_SPOOL_DIR": "/opt/pi-dispatch/spool",
		"RECEIVER_SPOOL_MAX": "1g", "RECEIVER_INBOX_MAX": "500",
	}))
	require.NoError(t, err)
	assert.Equal(t, 750*time.Millisecond, f.StoreTimeout)
	assert.Equal(t, "/opt/pi-dispatch/spool", f.SpoolDir)
	assert.Equal(t, int64(1<<30), f.SpoolMax)
	assert.Equal(t, 500, f.InboxMax)
	assert.Contains(t, f.String(), "spool=/opt/pi-dispatch/spool")

	for _, c := range []struct{ name, value, rule string }{
		{"RECEIVER_STORE_TIMEOUT", "2s", "from 100ms to 1.5s"},
		{"RECEIVER_STORE_TIMEOUT", "50ms", "from 100ms to 1.5s"},
		{"RECEIVER_STORE_TIMEOUT", "1", "needs a unit"},
		{"RECEIVER_SPOOL_DIR", "spool", "absolute path"},
		{"RECEIVER_SPOOL_DIR", "/opt/x/../spool", "clean path"},
		{"RECEIVER_SPOOL_MAX", "1m", "between 4m and 1t"},
		{"RECEIVER_SPOOL_MAX", "lots", "size"},
		{"RECEIVER_INBOX_MAX", "10", "from 100 to 1000000"},
		{"RECEIVER_INBOX_MAX", "1e4", "plain digits"},
	} {
		_, err := LoadForge(forgeEnv(map[string]string{c.name: c.value}))
		var ce *ConfigError
		require.ErrorAs(t, err, &ce, c.name+"="+c.value)
		assert.Equal(t, c.name, ce.Var)
		assert.Contains(t, ce.Rule, c.rule, c.name+"="+c.value)
	}
}
