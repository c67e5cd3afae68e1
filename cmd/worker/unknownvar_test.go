package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pidispatch/pidispatch/internal/testkit/logtest"
)

// A misspelt variable in the env file is said at boot, with the name it is
// closest to, and boot goes on.
func TestBootWarnsOfAMisspeltVariable(t *testing.T) {
	dir := t.TempDir()
	envFile := filepath.Join(dir, "worker.env")
	if err := os.WriteFile(envFile, []byte("PI_CONCURENCY=4\nPI_WORKER_NAME=unknown-var-test\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"PI_ENV_FILE": envFile, "VALKEY_URL": "redis://127.0.0.1:1/0", "PI_UNSIGNED_QUEUES": "*", "PI_LOGS_DIR": filepath.Join(dir, "logs"),
		"DOCKER_HOST": "unix://" + filepath.Join(dir, "no-docker.sock")}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	var stderr logtest.Buffer
	run(ctx, nil, func(k string) string { return env[k] }, os.Stdout, &stderr)
	out := stderr.String()
	if !strings.Contains(out, `"msg":"config_unknown_variable"`) || !strings.Contains(out, `"name":"PI_CONCURENCY"`) ||
		!strings.Contains(out, `"closest":"PI_CONCURRENCY"`) {
		t.Fatalf("no warning of PI_CONCURENCY:\n%s", out)
	}
}
