package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pidispatch/pidispatch/operator"
)

// doctor's forge-git line: ✓ with the version of a git forge jobs can run
// with; ✗ naming the version found, the one required and the fix for an
// older one, since the worker would refuse to boot with it.
func TestForgeGitCheckLine(t *testing.T) {
	t.Parallel()
	ok := forgeGitCheck(context.Background(), "")
	if ok.Status != operator.CheckOK || ok.Name != forgeGitName || !strings.HasPrefix(ok.Detail, "git 2.") ||
		!strings.HasSuffix(ok.Detail, "(forge jobs need 2.32.0 or later)") {
		t.Fatalf("the host's git: %+v", ok)
	}
	old := filepath.Join(t.TempDir(), "git")
	if err := os.WriteFile(old, []byte("#!/bin/sh\necho 'git version 2.20.0'\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	bad := forgeGitCheck(context.Background(), old)
	if bad.Status != operator.CheckFail || bad.Name != forgeGitName || bad.Fix == "" {
		t.Fatalf("git 2.20.0: %+v", bad)
	}
	for _, want := range []string{old, "is git 2.20.0", "need git 2.32.0 or later", "install git 2.32.0 or later"} {
		if !strings.Contains(bad.Detail, want) {
			t.Errorf("%q does not name %q", bad.Detail, want)
		}
	}
}
