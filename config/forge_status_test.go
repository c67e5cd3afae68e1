package config

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestLoadForgeStatusComment(t *testing.T) {
	f, err := LoadForge(forgeEnv(nil))
	require.NoError(t, err)
	assert.False(t, f.NoStatusComment, "on by default")
	f, err = LoadForge(forgeEnv(map[string]string{"RECEIVER_STATUS_COMMENT": "off"}))
	require.NoError(t, err)
	assert.True(t, f.NoStatusComment)
	_, err = LoadForge(forgeEnv(map[string]string{"RECEIVER_STATUS_COMMENT": "no"}))
	var ce *ConfigError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, "RECEIVER_STATUS_COMMENT", ce.Var)
	assert.Contains(t, ce.Error(), `"on" or "off"`)
}
