package config_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pidispatch/pidispatch/config"
	"github.com/pidispatch/pidispatch/dispatch/policy"
)

func TestLoadPauseWindows(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := filepath.Join(dir, "pause-windows.json")
	require.NoError(t, os.WriteFile(p, []byte(`{"windows":[{"scope":"*","from":"01:00","to":"02:00"}]}`), 0o600))
	w, err := config.LoadPauseWindows(p)
	require.NoError(t, err)
	require.Equal(t, 1, w.Len())

	bad := filepath.Join(dir, "bad.json")
	require.NoError(t, os.WriteFile(bad, []byte(`{"windows":[{"scope":"*","from":"01:00","to":"01:00"}]}`), 0o600))
	_, err = config.LoadPauseWindows(bad)
	require.ErrorContains(t, err, bad)
	require.ErrorContains(t, err, "windows[0].to")

	_, err = config.LoadPauseWindows(filepath.Join(dir, "missing.json"))
	require.ErrorIs(t, err, os.ErrNotExist)

	huge := filepath.Join(dir, "huge.json")
	require.NoError(t, os.WriteFile(huge, []byte(`{"windows":[]}`+strings.Repeat(" ", policy.MaxFileBytes)), 0o600))
	_, err = config.LoadPauseWindows(huge)
	require.ErrorContains(t, err, "larger than")
}

func TestLoadScopedLimits(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := filepath.Join(dir, "scoped-limits.json")
	require.NoError(t, os.WriteFile(p, []byte(`{"version":1,"limits":[{"scope":"acme/web","concurrent":1}]}`), 0o600))
	l, err := config.LoadScopedLimits(p)
	require.NoError(t, err)
	require.Equal(t, 1, l.Len())

	require.NoError(t, os.WriteFile(p, []byte(`{"version":1,"limits":[{"scope":"acme/web"}]}`), 0o600))
	_, err = config.LoadScopedLimits(p)
	require.ErrorContains(t, err, p)
	require.ErrorContains(t, err, "limits[0]")

	_, err = config.LoadScopedLimits(filepath.Join(dir, "absent.json"))
	require.ErrorIs(t, err, os.ErrNotExist)
}
