package stack_test

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// stack assembles the Worker from the library's parts; the operator's
// commands sit above it. An import of operator, direct or through another
// package, would run a dependency back up.
func TestStackDoesNotImportOperator(t *testing.T) {
	goBin := filepath.Join(runtime.GOROOT(), "bin", "go")
	out, err := exec.Command(goBin, "list", "-deps", "-f", "{{.ImportPath}}", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 2 {
		t.Fatalf("go list -deps listed %d packages; the check reads nothing", len(deps))
	}
	for _, p := range deps {
		if p == "github.com/pidispatch/pidispatch/operator" || strings.HasPrefix(p, "github.com/pidispatch/pidispatch/operator/") {
			t.Errorf("stack depends on %s", p)
		}
	}
}
