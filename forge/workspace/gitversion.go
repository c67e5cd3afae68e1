package workspace

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"time"
)

// GitVersion is a git release, as `git --version` names it.
type GitVersion struct{ Major, Minor, Patch int }

func (v GitVersion) String() string { return fmt.Sprintf("%d.%d.%d", v.Major, v.Minor, v.Patch) }

// Less reports whether v is an older release than w.
func (v GitVersion) Less(w GitVersion) bool {
	if v.Major != w.Major {
		return v.Major < w.Major
	}
	if v.Minor != w.Minor {
		return v.Minor < w.Minor
	}
	return v.Patch < w.Patch
}

// MinGitVersion is the oldest git the host's git work is safe with. The
// walls publish stands on are its own (no host git opens the job's
// repository: jobrepo.go); of git it needs that GIT_CONFIG_COUNT (2.31)
// and GIT_CONFIG_GLOBAL (2.32) are honoured, since an older git ignores
// them silently and would read ~/.gitconfig and drop every override, the
// credential header among them. Git's own lazy-fetch block (2.39.4,
// 2.44.1, 2.45.1) is not relied on, so a distribution's patched 2.3x stays
// usable.
var MinGitVersion = GitVersion{2, 32, 0}

// ErrGitTooOld: the host's git is older than MinGitVersion.
var ErrGitTooOld = errors.New("git is older than the forge workspace needs")

// ErrGitVersionUnknown: `git --version` answered no version the host reads.
var ErrGitVersionUnknown = errors.New("git answered no version")

// GitVersionError is a git the forge workspace refuses: the program, the
// version found (zero with Said when it answered none) and the one required.
type GitVersionError struct {
	Program  string
	Found    GitVersion
	Said     string
	Required GitVersion
}

func (e *GitVersionError) Error() string {
	if e.Found == (GitVersion{}) {
		return fmt.Sprintf("%s --version answered %q, not a git version: install git %s or later, or point the workspace's Git at one",
			e.Program, e.Said, e.Required)
	}
	return fmt.Sprintf("%s is git %s, older than %s, the oldest the forge workspace runs with: install git %s or later, or point the workspace's Git at one",
		e.Program, e.Found, e.Required, e.Required)
}

func (e *GitVersionError) Unwrap() error {
	if e.Found == (GitVersion{}) {
		return ErrGitVersionUnknown
	}
	return ErrGitTooOld
}

var gitVersionLine = regexp.MustCompile(`^git version (\d+)\.(\d+)(?:\.(\d+))?`)

// gitVersionTimeout bounds `git --version`.
const gitVersionTimeout = 10 * time.Second

// CheckGit runs program ("": "git") once with --version and answers a
// *GitVersionError (ErrGitTooOld, ErrGitVersionUnknown) unless it is
// MinGitVersion or later. A worker checks it at boot, before its first
// forge job, so an old git stops the worker with the fix rather than
// running publish on a git that ignores its environment.
func CheckGit(ctx context.Context, program string) error {
	_, err := ReadGitVersion(ctx, program)
	return err
}

// ReadGitVersion is CheckGit that also answers the version found, for a
// check that reports it.
func ReadGitVersion(ctx context.Context, program string) (GitVersion, error) {
	if program == "" {
		program = "git"
	}
	ctx, cancel := context.WithTimeout(ctx, gitVersionTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, program, "--version")
	cmd.Env = []string{"LC_ALL=C", "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "HOME=/nonexistent"}
	out, err := cmd.Output()
	if err != nil {
		return GitVersion{}, fmt.Errorf("%s --version: %w", program, err)
	}
	said := string(out)
	if len(said) > 200 {
		said = said[:200]
	}
	v, ok := parseGitVersion(said)
	if !ok {
		return GitVersion{}, &GitVersionError{Program: program, Said: said, Required: MinGitVersion}
	}
	if v.Less(MinGitVersion) {
		return v, &GitVersionError{Program: program, Found: v, Said: said, Required: MinGitVersion}
	}
	return v, nil
}

// CheckGit checks the Manager's git program (Config.Git): see CheckGit.
func (m *Manager) CheckGit(ctx context.Context) error { return CheckGit(ctx, m.cfg.Git) }

// GitProgram is the git program the Manager runs (Config.Git, "git" when
// unset), for a boot check's message.
func (m *Manager) GitProgram() string { return m.cfg.Git }

// parseGitVersion reads "git version 2.39.5", "git version 2.45.2 (Apple
// Git-154)" or "git version 2.47.1.windows.1".
func parseGitVersion(s string) (GitVersion, bool) {
	m := gitVersionLine.FindStringSubmatch(s)
	if m == nil {
		return GitVersion{}, false
	}
	var v GitVersion
	var err error
	if v.Major, err = strconv.Atoi(m[1]); err != nil {
		return GitVersion{}, false
	}
	if v.Minor, err = strconv.Atoi(m[2]); err != nil {
		return GitVersion{}, false
	}
	if m[3] != "" {
		if v.Patch, err = strconv.Atoi(m[3]); err != nil {
			return GitVersion{}, false
		}
	}
	return v, v != (GitVersion{})
}
