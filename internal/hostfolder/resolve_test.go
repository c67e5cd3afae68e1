package hostfolder

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Resolve: the folder, every symlink resolved, must be a directory
// inside a root (resolved too); anything else is refused with the rule.
func TestResolve(t *testing.T) {
	base := t.TempDir()
	root := filepath.Join(base, "root")
	in := filepath.Join(root, "proj")
	out := filepath.Join(base, "out")
	for _, d := range []string{in, out, root + "x"} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	file := filepath.Join(root, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Symlink(out, filepath.Join(root, "escape")))
	must(os.Symlink(in, filepath.Join(root, "inner-link")))
	rootLink := filepath.Join(base, "root-link")
	must(os.Symlink(root, rootLink))
	realIn, _ := filepath.EvalSymlinks(in)

	for _, tc := range []struct {
		folder string
		roots  []string
		want   string // resolved path, or a piece of the rule
		ok     bool
	}{
		{in, []string{root}, realIn, true},
		{root, []string{root}, "", true},
		{filepath.Join(root, "inner-link"), []string{root}, realIn, true},
		{filepath.Join(rootLink, "proj"), []string{rootLink}, realIn, true},
		{in, []string{rootLink}, realIn, true},
		{in, nil, "PI_FOLDER_ROOTS is not set", false},
		{filepath.Join(root, "escape"), []string{root}, "outside every", false},
		{out, []string{root}, "outside every", false},
		{file, []string{root}, "not a directory", false},
		{filepath.Join(root, "missing"), []string{root}, "cannot be resolved", false},
		{root + "/../out", []string{root}, "clean", false},
		{"relative/proj", []string{root}, "absolute", false},
		{root + "x", []string{root}, "outside every", false},
	} {
		got, err := Resolve(tc.folder, tc.roots)
		switch {
		case tc.ok && err != nil:
			t.Errorf("%s in %v: %v", tc.folder, tc.roots, err)
		case tc.ok && tc.want != "" && got != tc.want:
			t.Errorf("%s in %v: resolved %s, want %s", tc.folder, tc.roots, got, tc.want)
		case !tc.ok && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s in %v: %q, %v; want a refusal saying %q", tc.folder, tc.roots, got, err, tc.want)
		}
	}
}
