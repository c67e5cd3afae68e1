package config_test

import (
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
		var pe *config.ConfigError
		require.ErrorAs(t, err, &pe)
		require.Equal(t, k, pe.Var)
	}
	_, err = config.LoadPublish(env(map[string]string{"PI_PUBLISH_MAX_FILES": "lots"}))
	require.Error(t, err)
}
