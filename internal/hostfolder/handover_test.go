package hostfolder

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestHandOver(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "src"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "src", "a.go"), []byte("x"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "run.sh"), []byte("x"), 0o744))
	require.NoError(t, os.Symlink("/etc/passwd", filepath.Join(dir, "link")))

	// The image's user: everything writable by anyone, executables kept so.
	require.NoError(t, HandOver(dir, ""))
	mode := func(p string) os.FileMode {
		st, err := os.Lstat(filepath.Join(dir, p))
		require.NoError(t, err)
		return st.Mode()
	}
	require.Equal(t, os.FileMode(0o666), mode("src/a.go").Perm())
	require.Equal(t, os.FileMode(0o777), mode("run.sh").Perm())
	require.Equal(t, os.FileMode(0o777), mode("src").Perm())
	st, err := os.Stat("/etc/passwd")
	require.NoError(t, err)
	require.NotEqual(t, os.FileMode(0o666), st.Mode().Perm(), "a link's target is never touched")

	if os.Geteuid() != 0 {
		return
	}
	require.NoError(t, HandOver(dir, "65534:65533"))
	for _, p := range []string{".", "src", "src/a.go", "link"} {
		info, err := os.Lstat(filepath.Join(dir, p))
		require.NoError(t, err)
		sys := info.Sys().(*syscall.Stat_t)
		require.EqualValues(t, 65534, sys.Uid, p)
		require.EqualValues(t, 65533, sys.Gid, p)
	}
	root, err := os.Stat("/etc/passwd")
	require.NoError(t, err)
	require.EqualValues(t, 0, root.Sys().(*syscall.Stat_t).Uid, "a link's target is never touched")
}
