package workspace

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"

	"github.com/pidispatch/pidispatch/forge/token"
)

// maxGitOutput bounds what a git error quotes of git's standard error.
const maxGitOutput = 512

// gitCmd is one git invocation by the host, always in a repository the host
// made (the job's repository is read as data: jobrepo.go). Its
// configuration comes from that repository's own file, which only the host
// writes, then the environment: no system or global file, no terminal
// prompt, no hooks, no program any setting could name, no lazy fetch, and
// the credential (when given) as an HTTP header git is told about through
// GIT_CONFIG_* variables, never argv or a file. The overrides are a second
// wall, not the first: they hold only for the settings listed, so the first
// is that no job-written configuration is ever read.
type gitCmd struct {
	git    string
	dir    string // working directory ("" : inherit)
	env    []string
	config [][2]string
	stdin  []byte
}

func (m *Manager) git(dir string) *gitCmd {
	return &gitCmd{git: m.cfg.Git, dir: dir}
}

// gitDir is git in the bare repository dir, named (GIT_DIR) rather than
// found from the working folder.
func (m *Manager) gitDir(dir string) *gitCmd {
	return &gitCmd{git: m.cfg.Git, dir: dir, env: []string{"GIT_DIR=" + dir}}
}

// with adds a configuration pair (passed by environment).
func (g *gitCmd) with(key, value string) *gitCmd {
	g.config = append(g.config, [2]string{key, value})
	return g
}

// auth sends tok as basic auth to the origin of remote only, and refuses
// redirects (a credential never follows one).
func (g *gitCmd) auth(remote, user string, tok token.Token) *gitCmd {
	u, err := url.Parse(remote)
	if err != nil || tok.IsZero() {
		return g
	}
	origin := u.Scheme + "://" + u.Host + "/"
	cred := base64.StdEncoding.EncodeToString([]byte(user + ":" + tok.Reveal()))
	return g.with("http."+origin+".extraHeader", "Authorization: Basic "+cred)
}

func (g *gitCmd) run(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, g.git, args...)
	cmd.Dir = g.dir
	env := []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=/nonexistent",
		"XDG_CONFIG_HOME=/nonexistent",
		"GIT_CONFIG_NOSYSTEM=1",
		"GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_ATTR_NOSYSTEM=1",
		"GIT_NO_LAZY_FETCH=1",
		"GIT_NO_REPLACE_OBJECTS=1",
		"GIT_PROTOCOL_FROM_USER=0",
		"GIT_TERMINAL_PROMPT=0",
		"GIT_ASKPASS=/bin/false",
		"SSH_ASKPASS=/bin/false",
		"LC_ALL=C",
	}
	config := append([][2]string{
		{"core.hooksPath", "/dev/null"},
		{"core.fsmonitor", ""}, // empty: off, read alike before and after git 2.36
		{"core.sshCommand", "/bin/false"},
		{"core.askPass", "/bin/false"},
		{"core.gitProxy", ""},
		{"core.alternateRefsCommand", ""},
		{"core.attributesFile", "/dev/null"},
		{"diff.external", ""},
		{"credential.helper", ""},
		{"http.followRedirects", "false"},
		{"protocol.allow", "never"},
		{"protocol.https.allow", "always"},
		{"protocol.http.allow", "always"},
		{"commit.gpgSign", "false"},
		{"init.defaultBranch", "main"},
	}, g.config...)
	env = append(env, "GIT_CONFIG_COUNT="+strconv.Itoa(len(config)))
	for i, kv := range config {
		env = append(env, fmt.Sprintf("GIT_CONFIG_KEY_%d=%s", i, kv[0]), fmt.Sprintf("GIT_CONFIG_VALUE_%d=%s", i, kv[1]))
	}
	cmd.Env = append(env, g.env...)
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if g.stdin != nil {
		cmd.Stdin = bytes.NewReader(g.stdin)
	}
	if err := cmd.Run(); err != nil {
		return out.String(), classifyGit(args, stderr.String(), err)
	}
	return out.String(), nil
}

// GitError is a failed git command: its subcommand and the start of what it
// said (which names no credential: none is in its URL or argv).
type GitError struct {
	Op     string
	Stderr string
	Err    error
}

func (e *GitError) Error() string {
	return fmt.Sprintf("git %s: %v: %s", e.Op, e.Err, e.Stderr)
}

func (e *GitError) Unwrap() error { return e.Err }

func classifyGit(args []string, stderr string, err error) error {
	if len(stderr) > maxGitOutput {
		stderr = stderr[:maxGitOutput]
	}
	stderr = strings.TrimSpace(stderr)
	op := ""
	for _, a := range args {
		if !strings.HasPrefix(a, "-") {
			op = a
			break
		}
	}
	ge := &GitError{Op: op, Stderr: stderr, Err: err}
	var kind error
	switch s := strings.ToLower(stderr); {
	case strings.Contains(s, "error: 401"), strings.Contains(s, "error: 403"), strings.Contains(s, "authentication failed"):
		kind = token.ErrRefused
	case strings.Contains(s, "error: 404"), strings.Contains(s, "not found"), strings.Contains(s, "does not appear to be a git repository"):
		kind = token.ErrNoRepository
	case strings.Contains(s, "error: 5"), strings.Contains(s, "error: 429"), strings.Contains(s, "could not resolve"),
		strings.Contains(s, "failed to connect"), strings.Contains(s, "connection refused"), strings.Contains(s, "timed out"):
		kind = token.ErrUnavailable
	}
	if kind != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("%w: %w", kind, ge)
	}
	return ge
}
