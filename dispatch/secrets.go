package dispatch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"time"

	"github.com/pidispatch/pidispatch/internal/check"
)

// Limits of a secret resolver run.
const (
	MaxSecretOutput = 64 << 10 // bytes of resolver stdout
	MaxSecrets      = 256      // KEY=VALUE lines
	// SecretProfileEnv carries the profile name to the resolver, so one executable
	// can serve several profiles.
	SecretProfileEnv = "PI_SECRET_PROFILE"
	defaultPath      = "/usr/local/bin:/usr/bin:/bin"
	resolverWaitStop = 500 * time.Millisecond
)

// SecretError reports a failed resolver run. It names the profile and what went wrong
// (an exit code, a timeout, a line NUMBER) and never carries resolver output: stdout
// holds the values and stderr may echo them.
type SecretError struct {
	Profile string
	Reason  string
	// ExitCode is the resolver's exit code when it exited non-zero, else -1.
	ExitCode int
}

func (e *SecretError) Error() string {
	return "secret profile " + check.Quote(e.Profile) + ": " + e.Reason
}

var secretKeyRE = regexp.MustCompile(`^[A-Z_][A-Z0-9_]*$`)

// ResolveSecrets runs a secret profile's resolver and returns the KEY=VALUE pairs it
// prints.
//
// The resolver is path (absolute and clean), run with no arguments, stdin from
// /dev/null, stderr discarded, the working directory "/", and a minimal environment:
// PATH and HOME (the worker's own, PATH defaulting to /usr/local/bin:/usr/bin:/bin)
// and PI_SECRET_PROFILE=<profile>. It runs in its own process group, which is killed
// when timeout passes or ctx ends, and again after it exits, so a resolver cannot leave
// a process behind.
//
// Stdout is at most 64 KiB of lines: KEY=VALUE, the key matching ^[A-Z_][A-Z0-9_]*$ and
// the value everything after the first '=' (a trailing CR is dropped; NUL is refused).
// Blank lines and lines starting with '#' are skipped. Every failure is a *SecretError
// naming the profile and, for a bad line, its number only: no secret value ever appears
// in an error. When ctx itself ends first, the error wraps ctx.Err().
func ResolveSecrets(ctx context.Context, path, profile string, timeout time.Duration) (map[string]string, error) {
	fail := func(code int, format string, args ...any) (map[string]string, error) {
		return nil, &SecretError{Profile: profile, Reason: fmt.Sprintf(format, args...), ExitCode: code}
	}
	if !check.Name(profile) {
		return fail(-1, "profile name must match %s", check.NameSyntax)
	}
	if rule := check.AbsClean(path); rule != "" {
		return fail(-1, "resolver path %s", rule)
	}
	if timeout <= 0 {
		return fail(-1, "timeout must be positive")
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("secret profile %s: %w", check.Quote(profile), err)
	}

	runCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(runCtx, path)
	cmd.Dir = "/"
	cmd.Env = []string{
		"PATH=" + envOr("PATH", defaultPath),
		"HOME=" + envOr("HOME", "/"),
		SecretProfileEnv + "=" + profile,
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return killGroup(cmd) }
	// A grandchild that inherited stdout would otherwise keep Wait blocked after the
	// group kill; the kill reaches it, this only bounds the wait for the pipe to close.
	cmd.WaitDelay = resolverWaitStop
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return fail(-1, "cannot start resolver: %v", err)
	}
	if err := cmd.Start(); err != nil {
		// exec's error names the path and the OS reason, never output.
		return fail(-1, "cannot start resolver: %v", err)
	}
	out, readErr := io.ReadAll(io.LimitReader(stdout, MaxSecretOutput+1))
	tooBig := len(out) > MaxSecretOutput
	if tooBig {
		_ = killGroup(cmd)
	}
	waitErr := cmd.Wait()
	_ = killGroup(cmd) // stragglers that outlived a clean exit

	// A clean exit with all output read is a result, even if a deadline passed a
	// moment after it.
	if waitErr != nil || readErr != nil || tooBig {
		clear(out)
		switch {
		case ctx.Err() != nil:
			return nil, fmt.Errorf("secret profile %s: %w", check.Quote(profile), ctx.Err())
		case runCtx.Err() != nil:
			return fail(-1, "resolver timed out after %s (killed)", timeout)
		case tooBig:
			return fail(-1, "resolver printed more than %d bytes", MaxSecretOutput)
		}
		var ee *exec.ExitError
		if errors.As(waitErr, &ee) {
			if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				return fail(-1, "resolver killed by signal %s (its stderr is discarded: see the resolver's own logs)", ws.Signal())
			}
			return fail(ee.ExitCode(), "resolver exited with code %d (its stderr is discarded: see the resolver's own logs)", ee.ExitCode())
		}
		return fail(-1, "resolver did not finish cleanly (its output is discarded)")
	}
	secrets, lineNo, rule := parseSecretLines(out)
	clear(out)
	if rule != "" {
		if lineNo > 0 {
			return fail(-1, "line %d: %s", lineNo, rule)
		}
		return fail(-1, "%s", rule)
	}
	return secrets, nil
}

// parseSecretLines parses resolver output. On failure it returns the 1-based number of
// the offending line (0 when not about one line) and a rule that never quotes it.
func parseSecretLines(out []byte) (map[string]string, int, string) {
	secrets := map[string]string{}
	firstSeen := map[string]int{}
	for i, line := range bytes.Split(out, []byte{'\n'}) {
		n := i + 1
		line = bytes.TrimSuffix(line, []byte{'\r'})
		trimmed := bytes.TrimSpace(line)
		if len(trimmed) == 0 || trimmed[0] == '#' {
			continue
		}
		key, value, ok := strings.Cut(string(line), "=")
		switch {
		case !ok:
			return nil, n, "not a KEY=VALUE line"
		case !secretKeyRE.MatchString(key):
			return nil, n, "key must match ^[A-Z_][A-Z0-9_]*$"
		case strings.IndexByte(value, 0) >= 0:
			return nil, n, "value contains a NUL byte"
		}
		if first, dup := firstSeen[key]; dup {
			return nil, n, fmt.Sprintf("key already set on line %d", first)
		}
		if len(secrets) == MaxSecrets {
			return nil, n, fmt.Sprintf("more than %d secrets", MaxSecrets)
		}
		firstSeen[key] = n
		secrets[key] = value
	}
	return secrets, 0, ""
}

// killGroup SIGKILLs the resolver's whole process group. ESRCH (already gone) is fine.
func killGroup(cmd *exec.Cmd) error {
	if cmd.Process == nil {
		return nil
	}
	if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return err
	}
	return nil
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
