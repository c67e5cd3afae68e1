package dispatch_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pidispatch/pidispatch/dispatch"
)

func TestPrepareLogsDir(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "a", "runs")
	if err := dispatch.PrepareLogsDir(dir); err != nil {
		t.Fatal(err)
	}
	if entries, err := os.ReadDir(dir); err != nil || len(entries) != 0 {
		t.Fatalf("%s: %v %v, want it created and left empty", dir, entries, err)
	}

	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	bad := []string{filepath.Join(file, "runs")}
	if os.Getuid() != 0 { // root writes anywhere
		ro := filepath.Join(t.TempDir(), "ro")
		if err := os.Mkdir(ro, 0o500); err != nil {
			t.Fatal(err)
		}
		bad = append(bad, ro)
	}
	for _, d := range bad {
		err := dispatch.PrepareLogsDir(d)
		var ce *dispatch.ConfigError
		if !errors.As(err, &ce) || ce.Var != "PI_LOGS_DIR" || !strings.Contains(ce.Rule, "install -d") {
			t.Errorf("%s: %v, want a PI_LOGS_DIR config error naming the fix", d, err)
		}
	}
}
