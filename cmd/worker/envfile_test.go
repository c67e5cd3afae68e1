package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The worker reads the env file by the rule the CLI applies: PI_ENV_FILE,
// else ./.env, the shell winning. An invalid value in the file refuses boot
// naming the variable; a malformed line names the file and line. The
// context is bounded so a worker that ignored the file (and booted against
// an unreachable Valkey) fails the test instead of hanging it; its name is
// the test's own, so such a worker never touches another's containers.
func TestWorkerReadsTheEnvFile(t *testing.T) {
	dir := t.TempDir()
	named := filepath.Join(dir, "deploy.env")
	if err := os.WriteFile(named, []byte("VALKEY_URL=redis://127.0.0.1:1/0\nPI_CONCURRENCY=0\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	dot := filepath.Join(dir, ".env")
	if err := os.WriteFile(dot, []byte("VALKEY_URL=redis://127.0.0.1:1/0\n\nPI_JOB_IMAGE=img:x   # default image\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	boot := func(shell map[string]string) (int, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		var stderr bytes.Buffer
		code := run(ctx, nil, func(k string) string { return shell[k] }, io.Discard, &stderr)
		return code, stderr.String()
	}
	if code, out := boot(map[string]string{"PI_ENV_FILE": named, "PI_WORKER_NAME": "envfile-test"}); code != exitConfig || !strings.Contains(out, "PI_CONCURRENCY") {
		t.Errorf("PI_ENV_FILE: exit %d, %q; want 2 naming PI_CONCURRENCY", code, out)
	}
	// The shell wins over the file: its valid value replaces the file's 0,
	// and the remaining problem is the shell's own.
	if code, out := boot(map[string]string{"PI_ENV_FILE": named, "PI_CONCURRENCY": "2", "PI_WORKER_NAME": "bad name"}); code != exitConfig ||
		strings.Contains(out, "PI_CONCURRENCY") || !strings.Contains(out, "PI_WORKER_NAME") {
		t.Errorf("shell over file: exit %d, %q", code, out)
	}
	if code, out := boot(map[string]string{"PI_WORKER_NAME": "envfile-test"}); code != exitConfig || !strings.Contains(out, dot+":3: PI_JOB_IMAGE: the value holds a comment") {
		t.Errorf("./.env: exit %d, %q; want 2 naming %s:3", code, out, dot)
	}
}
