package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
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
	gitUnsafe                  // its configuration would make git run a program: not run
)

// gitStatusTimeout bounds the git call: a huge work tree on a slow disk must
// not hang the command.
const gitStatusTimeout = 15 * time.Second

// gitStatus runs `git -C folder status --porcelain` and classifies its
// answer. detail is a short description for a message (the first changed
// paths, or git's own error line).
//
// The folder is a job's: its .git/config may have been written by the
// agent. Before status runs, the repository's configuration is read as
// data (gitConfigKeys) and a key that makes git run a program refuses the
// check (gitUnsafe, detail naming the key); status itself runs with the
// hooks, fsmonitor and untracked cache switched off.
func gitStatus(ctx context.Context, folder string) (gitState, string) {
	ctx, cancel := context.WithTimeout(ctx, gitStatusTimeout)
	defer cancel()
	keys, state, detail := gitConfigKeys(ctx, folder)
	if state != gitClean {
		return state, detail
	}
	if key := unsafeGitKey(keys); key != "" {
		return gitUnsafe, key
	}
	cmd := exec.CommandContext(ctx, "git", "-C", folder, "-c", "core.fsmonitor=false", "-c", "core.hooksPath=/dev/null",
		"-c", "core.untrackedCache=false", "status", "--porcelain")
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
	detail = strings.Join(lines[:min(len(lines), shown)], "; ")
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

// gitConfigKeys reads, as data, the configuration keys of the repository
// folder is in: its common config and its worktree config, each with
// `git config --file`, which runs nothing and follows no include. Not a
// repository, or no git: that state, and no keys.
func gitConfigKeys(ctx context.Context, folder string) ([]string, gitState, string) {
	cmd := exec.CommandContext(ctx, "git", "-C", folder, "rev-parse", "--git-common-dir", "--git-dir")
	cmd.Env = gitEnv(os.Environ())
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		if errors.Is(err, exec.ErrNotFound) {
			return nil, gitMissing, "git not found"
		}
		msg := firstLine(errOut.String())
		if strings.Contains(msg, "not a git repository (or any") {
			return nil, gitNotRepo, ""
		}
		if msg == "" {
			msg = err.Error()
		}
		return nil, gitBroken, msg
	}
	dirs := strings.Fields(out.String())
	var keys []string
	for i, d := range dirs {
		if !filepath.IsAbs(d) {
			d = filepath.Join(folder, d)
		}
		file := filepath.Join(d, "config")
		if i == 1 {
			file = filepath.Join(d, "config.worktree")
		}
		if _, err := os.Lstat(file); err != nil {
			continue
		}
		list := exec.CommandContext(ctx, "git", "config", "--file", file, "--no-includes", "--null", "--name-only", "--list")
		list.Env = gitEnv(os.Environ())
		var names bytes.Buffer
		list.Stdout = &names
		if err := list.Run(); err != nil {
			return nil, gitBroken, "unreadable " + file
		}
		keys = append(keys, strings.Split(strings.TrimRight(names.String(), "\x00"), "\x00")...)
	}
	return keys, gitClean, ""
}

// unsafeGitKey answers the first key that makes git run a program or read
// another file's configuration ("" when none): a hook or fsmonitor path, a
// filter, a diff or merge driver, a command, a pager or editor, an
// include.
func unsafeGitKey(keys []string) string {
	exact := []string{"core.fsmonitor", "core.hookspath", "core.sshcommand", "core.gitproxy", "core.askpass", "core.editor",
		"core.pager", "core.alternaterefscommand", "core.worktree", "diff.external", "sequence.editor", "gpg.program",
		"uploadpack.packobjectshook", "credential.helper"}
	prefixes := []string{"filter.", "include.", "includeif.", "credential.", "pager.", "alias."}
	suffixes := []string{".command", ".textconv", ".driver", ".program", ".cmd", ".tool"}
	for _, k := range keys {
		k = strings.ToLower(strings.TrimSpace(k))
		switch {
		case k == "":
		case slices.Contains(exact, k):
			return k
		case slices.ContainsFunc(prefixes, func(p string) bool { return strings.HasPrefix(k, p) }):
			return k
		case slices.ContainsFunc(suffixes, func(s string) bool { return strings.HasSuffix(k, s) }):
			return k
		}
	}
	return ""
}
