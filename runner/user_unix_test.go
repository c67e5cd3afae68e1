//go:build unix

package runner_test

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/pidispatch/pidispatch/runner"
)

// TestLiveUser proves Spec.User reaches the engine: a job run as the owner of
// a folder only that uid may write writes it, and its file is that uid's.
func TestLiveUser(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("needs root to give the folder to another uid")
	}
	b := setup(t, runner.Config{})
	ws := t.TempDir()
	if err := os.Chmod(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(ws, 4321, 4322); err != nil {
		t.Fatal(err)
	}
	spec := b.spec(map[string]string{"JOB_WRITE_FILE": "mine.txt"})
	spec.WorkspaceDir, spec.User = ws, "4321:4322"
	res, err := b.d.Run(runCtx(t), spec)
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("err %v res %+v\n%s", err, res, res.Tail)
	}
	fi, err := os.Stat(filepath.Join(ws, "mine.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if st := fi.Sys().(*syscall.Stat_t); st.Uid != 4321 || st.Gid != 4322 {
		t.Fatalf("file owned by %d:%d, want 4321:4322", st.Uid, st.Gid)
	}
}
