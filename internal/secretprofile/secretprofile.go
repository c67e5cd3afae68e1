// Package secretprofile runs a secrets profile's resolver: a host's own
// executable that prints the profile's KEY=VALUE pairs. The values live only
// in the returned map: they never appear in an error, and the resolver's
// stderr is discarded.
package secretprofile

import (
	"bytes"
	"context"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/pidispatch/pidispatch/internal/check"
	"github.com/pidispatch/pidispatch/internal/sandbox"
)

// Limits of a secret resolver run.
const (
	MaxOutput  = 64 << 10 // bytes of resolver stdout
	MaxSecrets = 256      // KEY=VALUE lines
	// ProfileEnv carries the profile name to the resolver, so one executable
	// can serve several profiles.
	ProfileEnv = "PI_SECRET_PROFILE"
)

// Error reports a failed resolver run. It names the profile and what went wrong
// (an exit code, a timeout, a line NUMBER) and never carries resolver output: stdout
// holds the values and stderr may echo them.
type Error struct {
	Profile string
	Reason  string
	// ExitCode is the resolver's exit code when it exited non-zero, else -1.
	ExitCode int
}

func (e *Error) Error() string {
	return "secret profile " + check.Quote(e.Profile) + ": " + e.Reason
}

var secretKeyRE = regexp.MustCompile(`^[A-Z_][A-Z0-9_]*$`)

// Resolver runs resolvers: the Worker's secret resolver (its Deps.Secrets).
type Resolver struct{}

// Resolve is [Resolve].
func (Resolver) Resolve(ctx context.Context, path, profile string, timeout time.Duration) (map[string]string, error) {
	return Resolve(ctx, path, profile, timeout)
}

// Resolve runs a secret profile's resolver and returns the KEY=VALUE pairs it
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
// Blank lines and lines starting with '#' are skipped. Every failure is an *Error
// naming the profile and, for a bad line, its number only: no secret value ever appears
// in an error. When ctx itself ends first, the error wraps ctx.Err().
func Resolve(ctx context.Context, path, profile string, timeout time.Duration) (map[string]string, error) {
	fail := func(code int, format string, args ...any) (map[string]string, error) {
		return nil, &Error{Profile: profile, Reason: fmt.Sprintf(format, args...), ExitCode: code}
	}
	if !check.Name(profile) {
		return fail(-1, "profile name must match %s", check.NameSyntax)
	}
	res := sandbox.Run(ctx, sandbox.Spec{
		Path: path, Env: []string{ProfileEnv + "=" + profile}, Timeout: timeout, MaxOutput: MaxOutput,
	})
	if res.Outcome != sandbox.Exited || res.ExitCode != 0 {
		return resolverFailed(profile, timeout, res)
	}
	out := res.Stdout
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

// resolverFailed is the error of a resolver run that gave no output to parse.
func resolverFailed(profile string, timeout time.Duration, res sandbox.Result) (map[string]string, error) {
	fail := func(code int, format string, args ...any) (map[string]string, error) {
		return nil, &Error{Profile: profile, Reason: fmt.Sprintf(format, args...), ExitCode: code}
	}
	switch res.Outcome {
	case sandbox.BadPath:
		return fail(-1, "resolver path %s", res.Rule)
	case sandbox.BadTimeout:
		return fail(-1, "timeout must be positive")
	case sandbox.Cancelled:
		return nil, fmt.Errorf("secret profile %s: %w", check.Quote(profile), res.Err)
	case sandbox.StartFailed:
		// exec's error names the path and the OS reason, never output.
		return fail(-1, "cannot start resolver: %v", res.Err)
	case sandbox.TimedOut:
		return fail(-1, "resolver timed out after %s (killed)", timeout)
	case sandbox.TooMuchOutput:
		return fail(-1, "resolver printed more than %d bytes", MaxOutput)
	case sandbox.Signaled:
		return fail(-1, "resolver killed by signal %s (its stderr is discarded: see the resolver's own logs)", res.Signal)
	case sandbox.Exited:
		return fail(res.ExitCode, "resolver exited with code %d (its stderr is discarded: see the resolver's own logs)", res.ExitCode)
	}
	return fail(-1, "resolver did not finish cleanly (its output is discarded)")
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
