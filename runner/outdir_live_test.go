package runner_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/pidispatch/pidispatch/runner"
)

// TestLiveOutDir proves the output folder works inside a read-only /job on a
// real engine: a job writes /job/out/x and the file lands in the host's
// OutDir, while its write of /job/x fails with a read-only file system and
// leaves the job folder as it was. The test job writes only
// /workspace/<name> (JOB_WRITE_FILE), so a symbolic link of that name in the
// workspace points its write at the path under test.
func TestLiveOutDir(t *testing.T) {
	t.Parallel()
	b := setup(t, runner.Config{})
	jobDir, outDir := t.TempDir(), t.TempDir()
	// The job runs as root without capabilities (no DAC override).
	if err := os.Chmod(outDir, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(jobDir, "job.json"), []byte(`{"jobId":"out"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(name, target string) runner.Result {
		t.Helper()
		ws := t.TempDir()
		if err := os.Chmod(ws, 0o777); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, filepath.Join(ws, name)); err != nil {
			t.Fatal(err)
		}
		spec := b.spec(map[string]string{"JOB_WRITE_FILE": name})
		spec.JobDir, spec.OutDir, spec.WorkspaceDir = jobDir, outDir, ws
		res, err := b.d.Run(runCtx(t), spec)
		if err != nil || res.NeverStarted {
			t.Fatalf("err %v res %+v\n%s", err, res, res.Tail)
		}
		return res
	}

	res := run("x", "/job/out/x")
	if res.ExitCode != 0 || !bytes.Contains(res.Tail, []byte(`{"jobId":"out"}`)) {
		t.Fatalf("writing /job/out/x: exit %d\n%s", res.ExitCode, res.Tail)
	}
	if data, err := os.ReadFile(filepath.Join(outDir, "x")); err != nil || string(data) != "written by jobprog\n" {
		t.Fatalf("the output folder's file: %q %v", data, err)
	}
	if entries, err := os.ReadDir(filepath.Join(jobDir, "out")); err != nil || len(entries) != 0 {
		t.Fatalf("the mount point in the job folder should be an empty folder: %v %v", entries, err)
	}

	res = run("y", "/job/y")
	if res.ExitCode != 1 || !bytes.Contains(res.Tail, []byte("read-only file system")) {
		t.Fatalf("writing /job/y: exit %d, want 1 with a read-only file system\n%s", res.ExitCode, res.Tail)
	}
	if entries, _ := os.ReadDir(jobDir); len(entries) != 2 {
		t.Fatalf("the job folder changed: %v", entries)
	}
}
