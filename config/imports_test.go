package config_test

import (
	"os/exec"
	"strings"
	"testing"
)

// config and policy link no backend and no third-party module, so a
// front-end, doctor or a test can load a configuration anywhere; dispatch,
// which config builds on, links no third-party module either.
func TestImportsStayLight(t *testing.T) {
	t.Parallel()
	const module = "github.com/pidispatch/pidispatch/"
	backends := []string{"queue", "registry", "lease", "runner", "valkey", "cronsync", "fleetstate", "stack", "gateway", "observe", "operator", "enqueue"}
	for _, pkg := range []string{"../config", "../dispatch/policy", "../dispatch"} {
		out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", pkg).Output()
		if err != nil {
			t.Fatalf("go list %s: %v", pkg, err)
		}
		deps := strings.Fields(string(out))
		if len(deps) == 0 {
			t.Fatalf("go list %s found nothing", pkg)
		}
		for _, dep := range deps {
			rest, ours := strings.CutPrefix(dep, module)
			if !ours {
				t.Errorf("%s links %s, a third-party module", pkg, dep)
				continue
			}
			top, _, _ := strings.Cut(rest, "/")
			for _, b := range backends {
				if top == b {
					t.Errorf("%s links the backend %s", pkg, dep)
				}
			}
		}
	}
}
