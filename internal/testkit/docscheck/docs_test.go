package docscheck

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// offTopic are phrases that speak about how the software was built rather
// than about the software, or point at files that do not ship with it.
var offTopic = []*regexp.Regexp{
	regexp.MustCompile(`(?i)\b(first|second|third|fourth|this|previous|last|next) session\b`),
	regexp.MustCompile(`(?i)\bsession's (figures|runs|first)\b`),
	regexp.MustCompile(`(?i)\bthe issue\b|\bissue's\b|\bissue #?\d+\b`),
	regexp.MustCompile(`ARCHITECTURE\.md|shared folder|\.\./shared|original-pi-dispatch\.md|§\d`),
}

// docFiles lists every Markdown file the module ships outside node_modules.
func docFiles(t *testing.T) []string {
	t.Helper()
	root := filepath.Join("..", "..", "..")
	var files []string
	for _, dir := range []string{"docs", "examples", "deploy", "agent", "test"} {
		_ = filepath.WalkDir(filepath.Join(root, dir), func(p string, d os.DirEntry, err error) error {
			if err != nil {
				return nil
			}
			if d.IsDir() && d.Name() == "node_modules" {
				return filepath.SkipDir
			}
			if !d.IsDir() && strings.HasSuffix(p, ".md") {
				files = append(files, p)
			}
			return nil
		})
	}
	files = append(files, filepath.Join(root, "README.md"))
	if len(files) < 5 {
		t.Fatalf("found only %d doc files under %s; is the test running from internal/testkit/docscheck?", len(files), root)
	}
	return files
}

// TestDocsSpeakToUsers fails on a doc line that narrates the work behind the
// software or cites a file outside the repository. Fenced blocks are
// examples of what the software writes (a prompt naming "issue #12"), not
// narration, and are left out.
func TestDocsSpeakToUsers(t *testing.T) {
	for _, f := range docFiles(t) {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		fence := ""
		for i, line := range strings.Split(string(raw), "\n") {
			if fence != "" || isFence(line) {
				fence = nextFence(fence, line)
				continue
			}
			for _, re := range offTopic {
				if m := re.FindString(line); m != "" {
					t.Errorf("%s:%d: %q speaks about the work, not the software: %s", f, i+1, m, strings.TrimSpace(line))
				}
			}
		}
	}
}

// TestCommentsCiteShippedFiles fails on Go source that points a reader at a
// design document or folder that does not ship with the module.
func TestCommentsCiteShippedFiles(t *testing.T) {
	outside := regexp.MustCompile(`ARCHITECTURE|\.\./shared/|original-pi-dispatch\.md`)
	root := filepath.Join("..", "..", "..")
	self, _ := filepath.Abs(".")
	_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil || (d.IsDir() && (d.Name() == "node_modules" || d.Name() == ".git")) {
			return filepath.SkipDir
		}
		if abs, _ := filepath.Abs(filepath.Dir(p)); d.IsDir() || !strings.HasSuffix(p, ".go") || abs == self {
			return nil
		}
		raw, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(raw), "\n") {
			if m := outside.FindString(line); m != "" {
				t.Errorf("%s:%d: cites %q, which does not ship with the module", p, i+1, m)
			}
		}
		return nil
	})
}

// TestArchitectureNamesEveryPackage fails when docs/architecture.md leaves
// out a public package directory of the module: a reader looking for a
// package there must find it. Directories under internal/, testdata/,
// node_modules/ and nested modules (bench/) are not public packages here.
func TestArchitectureNamesEveryPackage(t *testing.T) {
	root := filepath.Join("..", "..", "..")
	raw, err := os.ReadFile(filepath.Join(root, "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	dirs := publicPackageDirs(t, root)
	if len(dirs) < 10 {
		t.Fatalf("found only %d package directories under %s; is the test running from internal/testkit/docscheck?", len(dirs), root)
	}
	for _, dir := range dirs {
		if !strings.Contains(doc, "`"+dir+"`") && !strings.Contains(doc, "`"+dir+"/") {
			t.Errorf("docs/architecture.md does not name package %s (write it as `%s`)", dir, dir)
		}
	}
}

// publicPackageDirs lists, slash-separated and relative to root, every
// directory of the module holding a .go file, outside internal/ and nested
// modules.
func publicPackageDirs(t *testing.T, root string) []string {
	t.Helper()
	seen := map[string]bool{}
	var dirs []string
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			name := d.Name()
			switch {
			case rel == ".":
				return nil
			case rel == "internal", name == "testdata", name == "node_modules", name == "vendor",
				strings.HasPrefix(name, "."), strings.HasPrefix(name, "_"):
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(p, "go.mod")); err == nil {
				return filepath.SkipDir // another module
			}
			return nil
		}
		if dir := filepath.ToSlash(filepath.Dir(rel)); strings.HasSuffix(p, ".go") && dir != "." && !seen[dir] {
			seen[dir] = true
			dirs = append(dirs, dir)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return dirs
}

// TestReadmePointsAtArchitecture fails when the README stops linking the
// architecture page.
func TestReadmePointsAtArchitecture(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(raw), "(docs/architecture.md)") {
		t.Error("README.md does not link docs/architecture.md")
	}
}

// keyIntoContainer are phrases that say a provider key enters a job's
// container or environment.
var keyIntoContainer = regexp.MustCompile(`(?i)(gets the key in|key in its environment|keys? (still )?reach(es)? (the job|pi)|become container env|enters? the container)`)

// Every page says what the code does with provider keys: with the model
// gateway (the default) none enters a container, so a sentence that says a
// key reaches the job must name the gateway (or PI_GATEWAY=off) beside it.
// And no recipe sends every provider's calls to one provider's URL.
func TestDocsSayWhereProviderKeysGo(t *testing.T) {
	oneProvider := regexp.MustCompile(`PI_MODEL_UPSTREAM=https://api\.(anthropic|openai)\.com`)
	for _, f := range docFiles(t) {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, para := range strings.Split(string(data), "\n\n") {
			if keyIntoContainer.MatchString(para) && !strings.Contains(strings.ToLower(para), "gateway") {
				t.Errorf("%s, paragraph %d says a key reaches the job without naming the gateway: %q", f, i+1, keyIntoContainer.FindString(para))
			}
		}
		if m := oneProvider.FindString(string(data)); m != "" {
			t.Errorf("%s sets %s: PI_MODEL_UPSTREAM sends every provider's calls there; use PI_PROVIDER_URLS", f, m)
		}
	}
}

// isFence reports whether line opens or closes a fenced block (``` or ~~~,
// three or more, after at most three spaces).
func isFence(line string) bool {
	t := strings.TrimLeft(line, " ")
	return len(line)-len(t) <= 3 && (strings.HasPrefix(t, "```") || strings.HasPrefix(t, "~~~"))
}

// nextFence is the fence open after line: a line that opens a block sets it
// to the fence's run of characters, one that closes it (the same character,
// at least as long, nothing after it) ends it.
func nextFence(open, line string) string {
	t := strings.TrimLeft(line, " ")
	if open == "" {
		if !isFence(line) {
			return ""
		}
		return t[:len(t)-len(strings.TrimLeft(t, t[:1]))]
	}
	run := t[:len(t)-len(strings.TrimLeft(t, open[:1]))]
	if len(run) >= len(open) && strings.TrimSpace(t[len(run):]) == "" && len(line)-len(t) <= 3 {
		return ""
	}
	return open
}
