package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"time"
)

// gitState is what git says about a folder before a run is queued in it.
type gitState int

const (
	gitClean   gitState = iota // a work tree without changes
	gitNotRepo                 // not inside a git work tree: nothing to protect
	gitDirty                   // uncommitted or untracked changes
	gitMissing                 // no git binary: the state is unknown
	gitBroken                  // a repository git cannot read (ownership, corruption)
)

// gitStatusTimeout bounds the git call: a huge work tree on a slow disk must
// not hang the command.
const gitStatusTimeout = 15 * time.Second

// gitStatus runs `git -C folder status --porcelain` and classifies its
// answer. detail is a short description for a message (the first changed
// paths, or git's own error line).
func gitStatus(ctx context.Context, folder string) (gitState, string) {
	ctx, cancel := context.WithTimeout(ctx, gitStatusTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "git", "-C", folder, "status", "--porcelain")
	cmd.Env = gitEnv(os.Environ())
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	if errors.Is(err, exec.ErrNotFound) {
		return gitMissing, "git not found"
	}
	if err != nil {
		msg := firstLine(errOut.String())
		// "not a git repository (or any of the parent directories)", or "(or
		// any parent up to mount point ...)". A bare "not a git repository:
		// <path>" is a .git that points nowhere: broken, not absent.
		if strings.Contains(msg, "not a git repository (or any") {
			return gitNotRepo, ""
		}
		if msg == "" {
			msg = err.Error()
		}
		return gitBroken, msg
	}
	lines := strings.Split(strings.TrimRight(out.String(), "\n"), "\n")
	if len(lines) == 1 && lines[0] == "" {
		return gitClean, ""
	}
	const shown = 3
	detail := strings.Join(lines[:min(len(lines), shown)], "; ")
	if len(lines) > shown {
		detail += "; ..."
	}
	return gitDirty, detail
}

// gitEnv is the environment of the git call: the caller's, without the
// variables that would point git at another repository, in the C locale so
// its messages can be read, and without optional locks (a status must not
// take the index lock of a repository someone is working in).
func gitEnv(environ []string) []string {
	out := make([]string, 0, len(environ)+3)
	for _, kv := range environ {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY", "GIT_COMMON_DIR", "LC_ALL", "LANG", "LANGUAGE":
			continue
		}
		out = append(out, kv)
	}
	return append(out, "LC_ALL=C", "GIT_OPTIONAL_LOCKS=0", "GIT_TERMINAL_PROMPT=0")
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return strings.TrimSpace(s)
}
