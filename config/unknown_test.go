package config_test

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/pidispatch/pidispatch/config"
)

func TestUnknownVarsNameTheClosestKnownOne(t *testing.T) {
	t.Parallel()
	got := config.UnknownVars([]string{"PI_CONCURENCY", "PI_WORKER_NAME", "GITHUB_PATT", "HOME", "PI_AGENT_MODEL", "PI_ZZZ_TOTALLY_ELSE", "PI_CONCURENCY"})
	want := []config.UnknownVar{{Name: "GITHUB_PATT", Closest: "GITHUB_PAT"}, {Name: "PI_CONCURENCY", Closest: "PI_CONCURRENCY"}, {Name: "PI_ZZZ_TOTALLY_ELSE"}}
	if !slices.Equal(got, want) {
		t.Fatalf("UnknownVars = %+v, want %+v", got, want)
	}
	if s := got[1].String(); !strings.Contains(s, "did you mean PI_CONCURRENCY?") {
		t.Fatalf("%q", s)
	}
}

// Every variable .env.example names, and every one of the families the
// source reads, is known: a new variable is never warned about as unknown.
func TestKnownVarsCoverEveryDocumentedAndReadVariable(t *testing.T) {
	t.Parallel()
	root, modPath := moduleRoot(t)
	raw, err := os.ReadFile(filepath.Join(root, ".env.example"))
	if err != nil {
		t.Fatal(err)
	}
	names := regexp.MustCompile(`(?m)^#? ?([A-Z][A-Z0-9_]+)=`).FindAllStringSubmatch(string(raw), -1)
	var all []string
	for _, m := range names {
		all = append(all, m[1])
	}
	reads, _ := scanEnvReads(moduleSources(t, root), modPath)
	for name := range reads {
		all = append(all, name)
	}
	if len(all) < 50 {
		t.Fatalf("found only %d names: the scan is blind", len(all))
	}
	for _, u := range config.UnknownVars(all) {
		t.Errorf("%s is documented or read but config.KnownVars lacks it", u.Name)
	}
}
