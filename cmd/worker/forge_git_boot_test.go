package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pidispatch/pidispatch/internal/image/jobimage"
)

// A worker that holds a forge credential refuses to boot (exit 2) when the
// git it finds first on PATH is older than 2.32.0, naming the version found,
// the one required and the fix, before it dials Valkey.
func TestForgeWorkerWithOldGitRefusesBoot(t *testing.T) {
	t.Parallel()
	bin := workerBinary(t)
	dir := t.TempDir()
	gitDir := filepath.Join(dir, "bin")
	if err := os.MkdirAll(gitDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(gitDir, "git"), []byte("#!/bin/sh\necho 'git version 2.20.0'\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	valkey := listenRecorder(t, "tcp", "127.0.0.1:0")
	p := startProcess(t, bin, processEnv(map[string]string{
		"VALKEY_URL": "redis://" + valkey.ln.Addr().String() + "/0", "PI_WORKER_NAME": "oldgit-boot-" + randomHex(4),
		"PI_LOGS_DIR": filepath.Join(dir, "logs"), "PI_JOB_IMAGE": jobimage.TestTag,
		"FORGEJO_URL": "https://forgejo.example", "FORGEJO_TOKEN": "t0ken",
		"PATH": gitDir + string(os.PathListSeparator) + os.Getenv("PATH"),
	}))
	code := p.exit(t, argsGuard)
	out := p.stderr.String()
	if code != exitConfig {
		t.Fatalf("exit %d, want %d; stderr:\n%s", code, exitConfig, out)
	}
	for _, want := range []string{filepath.Join(gitDir, "git"), "is git 2.20.0", "need git 2.32.0 or later", "install git 2.32.0 or later"} {
		if !strings.Contains(out, want) {
			t.Errorf("stderr does not name %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "t0ken") {
		t.Errorf("stderr holds the forge token:\n%s", out)
	}
	if n := valkey.accepted.Load(); n != 0 {
		t.Errorf("the refused worker dialled Valkey %d times", n)
	}
}
