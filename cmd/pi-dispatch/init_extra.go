package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// initPauseWindowsExample is an example pause-windows file. JSON has no
// comments and the parser refuses unknown keys, so the example is a file of
// its own name, never read (PI_PAUSE_WINDOWS_FILE names pause-windows.json),
// that parses as it is (a test checks), and init prints what its fields mean.
const (
	initPauseWindowsFile = "pause-windows.example.json"
	initPauseWindows     = `{
  "windows": [
    { "scope": "*", "from": "22:00", "to": "06:00", "tz": "Europe/Amsterdam" },
    { "scope": "acme/web", "from": "09:00", "to": "17:30", "tz": "America/New_York",
      "days": ["mon", "tue", "wed", "thu", "fri"] },
    { "scope": "/srv/app", "from": "00:00", "to": "23:59", "tz": "UTC",
      "dateFrom": "2026-12-24", "dateTo": "2026-12-26" }
  ]
}
`
	initPauseWindowsHelp = `  pause-windows.example.json
                      an example, not read: copy it to pause-windows.json and
                      uncomment PI_PAUSE_WINDOWS_FILE in .env. While a window is
                      open, a job whose scope matches waits (deferred, never
                      refused). Each window: scope ("*" for every job, else a
                      job's folder or owner/name); from, to ("HH:MM"; to before
                      from ends the next day); tz (an IANA zone, default UTC);
                      days ("mon".."sun", the days it starts, default every
                      day); dateFrom, dateTo ("YYYY-MM-DD", inclusive). Here:
                      nights for every job, office hours for acme/web, three
                      days off for /srv/app.
`
)

// gitExcludeTimeout bounds each git call of init.
const gitExcludeTimeout = 10 * time.Second

// excludeFromGit adds the files init created in dir to the repository's
// .git/info/exclude when dir is inside a git work tree, so a deployment
// scaffolded in a repository leaves nothing git would commit (.env may hold
// VALKEY_PASSWORD). info/exclude, unlike .gitignore, is itself never
// committed. Files git already ignores are left out. It returns the exclude
// file and the names added; outside a repository, or without git, nothing.
func excludeFromGit(ctx context.Context, dir string, names []string) (string, []string, error) {
	out, err := gitOutput(ctx, dir, "rev-parse", "--show-toplevel", "--git-path", "info/exclude")
	if err != nil {
		return "", nil, nil // not a work tree, or no git: nothing to protect
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 {
		return "", nil, fmt.Errorf("git rev-parse: unexpected answer %q", out)
	}
	top, exclude := lines[0], lines[1]
	if !filepath.IsAbs(exclude) {
		exclude = filepath.Join(dir, exclude)
	}
	realDir, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return "", nil, err
	}
	var patterns, added []string
	for _, name := range names {
		if _, err := gitOutput(ctx, dir, "check-ignore", "-q", "--", name); err == nil {
			continue // already ignored
		}
		rel, err := filepath.Rel(top, filepath.Join(realDir, name))
		if err != nil || strings.HasPrefix(rel, "..") {
			return "", nil, fmt.Errorf("%s is not inside the work tree %s", name, top)
		}
		patterns = append(patterns, "/"+gitignoreEscape(filepath.ToSlash(rel)))
		added = append(added, name)
	}
	if len(patterns) == 0 {
		return exclude, nil, nil
	}
	return exclude, added, appendExclude(exclude, patterns)
}

// appendExclude appends the patterns the exclude file does not hold yet.
func appendExclude(path string, patterns []string) error {
	old, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	have := strings.Split(string(old), "\n")
	var b strings.Builder
	if len(old) > 0 && !bytes.HasSuffix(old, []byte("\n")) {
		b.WriteString("\n")
	}
	b.WriteString("# deployment files written by pi-dispatch init\n")
	for _, p := range patterns {
		if !slices.Contains(have, p) {
			b.WriteString(p + "\n")
		}
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	_, werr := f.WriteString(b.String())
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	return werr
}

// gitignoreEscape makes a path match itself only in a gitignore file.
func gitignoreEscape(p string) string {
	var b strings.Builder
	for _, r := range p {
		if strings.ContainsRune(`\*?[!# `, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// gitOutput runs git -C dir args and returns its stdout.
func gitOutput(ctx context.Context, dir string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, gitExcludeTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "git", append([]string{"-C", dir}, args...)...)
	cmd.Env = gitEnv(os.Environ())
	var out bytes.Buffer
	cmd.Stdout = &out
	err := cmd.Run()
	return out.String(), err
}

// printGitExclude says what init added to the repository's exclude file.
func printGitExclude(ctx context.Context, e env, dir string, created []string) bool {
	exclude, added, err := excludeFromGit(ctx, dir, created)
	if err != nil {
		fmt.Fprintf(e.stderr, "pi-dispatch init: could not keep the new files out of git: %v (add them to .gitignore yourself; .env may hold VALKEY_PASSWORD)\n", err)
		return false
	}
	if len(added) > 0 {
		fmt.Fprintf(e.stdout, "\ngit: added %s to %s, so git does not offer to commit them (this clone only)\n", strings.Join(added, ", "), exclude)
	}
	return true
}
