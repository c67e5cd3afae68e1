package docscheck

import (
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/pidispatch/pidispatch"

// maxRootEntries bounds what `ls` shows at the root: a newcomer reads the
// root as the list of the project's concepts.
const maxRootEntries = 30

// testKit is the one folder whose imports may run back up: test support
// that builds real workers imports the packages it supports.
const testKit = "internal/testkit"

// imports lists each package of the module with the module's packages it
// imports (tests left out), paths relative to the module.
func imports(t *testing.T) map[string][]string {
	t.Helper()
	cmd := exec.Command("go", "list", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, "./...")
	cmd.Dir = filepath.Join("..", "..", "..")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	g := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		from, ok := strings.CutPrefix(f[0], module+"/")
		if !ok {
			continue
		}
		g[from] = nil
		for _, imp := range f[1:] {
			if to, ok := strings.CutPrefix(imp, module+"/"); ok {
				g[from] = append(g[from], to)
			}
		}
	}
	return g
}

// unit is the room a package lives in: its top folder, or for internal/ its
// second (internal/testkit is one room).
func unit(pkg string) string {
	parts := strings.Split(pkg, "/")
	if parts[0] == "internal" && len(parts) > 1 {
		return "internal/" + parts[1]
	}
	return parts[0]
}

// TestLayout holds the tree to its design: at most 30 root entries, no
// package at the root that only one package imports (the binaries and
// examples aside), and the folders' imports a ladder with no import running
// back up, except from the test kit. With -v it prints the ladder, lowest
// rung first: docs/architecture.md shows it.
func TestLayout(t *testing.T) {
	shown := rootEntries(t)
	if len(shown) > maxRootEntries {
		t.Errorf("the root holds %d entries, more than %d: %v", len(shown), maxRootEntries, shown)
	}
	g := imports(t)
	checkImporters(t, g)
	ladder, cycle := rungs(g)
	if len(cycle) > 0 {
		t.Errorf("imports run back up between these folders (each imports another of them): %v", cycle)
	}
	for i, r := range ladder {
		t.Logf("rung %d: %s", i+1, strings.Join(r, " "))
	}
}

// rootEntries are the names `ls` shows at the root of a clone: the tracked
// files and folders, hidden ones left out.
func rootEntries(t *testing.T) []string {
	t.Helper()
	cmd := exec.Command("git", "ls-files")
	cmd.Dir = filepath.Join("..", "..", "..")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	var names []string
	for _, f := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		top, _, _ := strings.Cut(f, "/")
		if !strings.HasPrefix(top, ".") && !slices.Contains(names, top) {
			names = append(names, top)
		}
	}
	return names
}

// checkImporters fails a root package that one package alone imports: it
// belongs beside (or inside) its importer.
func checkImporters(t *testing.T, g map[string][]string) {
	importers := map[string][]string{}
	for from, tos := range g {
		for _, to := range tos {
			importers[to] = append(importers[to], from)
		}
	}
	for pkg := range g {
		if strings.Contains(pkg, "/") {
			continue
		}
		if n := len(importers[pkg]); n < 2 {
			t.Errorf("root package %s has %d importer(s) %v: move it beside its importer", pkg, n, importers[pkg])
		}
	}
}

// rungs orders the folders (test kit left out) so each imports only lower
// ones; the folders left over, if any, import each other in a loop.
func rungs(g map[string][]string) (ladder [][]string, cycle []string) {
	deps := map[string]map[string]bool{}
	for from, tos := range g {
		u := unit(from)
		if u == testKit {
			continue
		}
		if deps[u] == nil {
			deps[u] = map[string]bool{}
		}
		for _, to := range tos {
			if v := unit(to); v != u && v != testKit {
				deps[u][v] = true
			}
		}
	}
	placed := map[string]bool{}
	for len(placed) < len(deps) {
		var rung []string
		for u, ds := range deps {
			if placed[u] {
				continue
			}
			if all(ds, placed) {
				rung = append(rung, u)
			}
		}
		if len(rung) == 0 {
			for u := range deps {
				if !placed[u] {
					cycle = append(cycle, u)
				}
			}
			slices.Sort(cycle)
			return ladder, cycle
		}
		slices.Sort(rung)
		for _, u := range rung {
			placed[u] = true
		}
		ladder = append(ladder, rung)
	}
	return ladder, nil
}

func all(ds, placed map[string]bool) bool {
	for d := range ds {
		if !placed[d] {
			return false
		}
	}
	return true
}
