// Package sandbox runs an operator's helper executable (a secret resolver, a
// wait check) under one set of rules, so every such run is as contained as the
// others: no shell, stdin from /dev/null, stderr discarded, the working
// directory "/", a minimal environment, a timeout, bounded stdout, and its own
// process group, killed on timeout or cancel and again after it exits, so the
// helper cannot leave a process behind.
package sandbox

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/pidispatch/pidispatch/internal/check"
)

// DefaultPath is the helper's PATH when the worker has none.
const DefaultPath = "/usr/local/bin:/usr/bin:/bin"

// waitStop bounds the wait for stdout to close once the helper is gone: a
// grandchild that inherited it would otherwise keep Wait blocked after the
// group kill (the kill reaches it; this only bounds the wait).
const waitStop = 500 * time.Millisecond

// Spec is one run.
type Spec struct {
	// Path is the executable: absolute and clean (check.AbsClean).
	Path string
	// Args are passed verbatim, without a shell.
	Args []string
	// Env is added, as KEY=VALUE, to PATH and HOME (the worker's own, PATH
	// defaulting to DefaultPath, HOME to "/"). Nothing else of the worker's
	// environment is passed.
	Env []string
	// Timeout bounds the run; it must be positive.
	Timeout time.Duration
	// MaxOutput is how many bytes of stdout are kept; a helper printing more
	// is killed (TooMuchOutput). 0 discards stdout.
	MaxOutput int
}

// Outcome is how a run ended.
type Outcome int

// Outcomes of Run, in the order Run decides them.
const (
	Exited        Outcome = iota // exited by itself with ExitCode, all output read
	BadPath                      // not started: Rule says what is wrong with Path
	BadTimeout                   // not started: Timeout is not positive
	Cancelled                    // ctx ended (before or during the run): nothing was learned
	TimedOut                     // killed when Timeout passed
	TooMuchOutput                // killed for printing more than MaxOutput bytes
	Signaled                     // killed by Signal
	StartFailed                  // could not start: Err is exec's error (the path and the OS reason)
	Unclean                      // did not finish cleanly (a stdout that stayed open, a read error)
)

// Result is what a run said. Stdout is set only for an exit with code 0: on
// any other outcome the output read is zeroed and dropped, since it may hold
// secrets.
type Result struct {
	Outcome  Outcome
	ExitCode int // for Exited; -1 otherwise
	Signal   syscall.Signal
	Rule     string // for BadPath
	Err      error  // ctx's error for Cancelled, exec's for StartFailed
	Stdout   []byte
}

// Run runs spec. It returns when the helper and its process group are gone,
// never later than about Timeout (plus a short grace for its stdout to close).
func Run(ctx context.Context, spec Spec) Result {
	res := Result{ExitCode: -1}
	switch rule := check.AbsClean(spec.Path); {
	case rule != "":
		res.Outcome, res.Rule = BadPath, rule
		return res
	case spec.Timeout <= 0:
		res.Outcome = BadTimeout
		return res
	case ctx.Err() != nil:
		res.Outcome, res.Err = Cancelled, ctx.Err()
		return res
	}
	runCtx, cancel := context.WithTimeout(ctx, spec.Timeout)
	defer cancel()
	cmd := command(runCtx, spec)
	out, tooBig, readErr, err := start(cmd, spec.MaxOutput)
	if err != nil {
		res.Outcome, res.Err = StartFailed, err
		return res
	}
	waitErr := cmd.Wait()
	_ = killGroup(cmd) // stragglers that outlived a clean exit

	// A clean exit with all output read is a result, even if a deadline passed a
	// moment after it.
	if waitErr == nil && readErr == nil && !tooBig {
		res.Outcome, res.ExitCode, res.Stdout = Exited, 0, out
		return res
	}
	clear(out)
	classify(ctx, runCtx, waitErr, tooBig, &res)
	return res
}

func command(ctx context.Context, spec Spec) *exec.Cmd {
	cmd := exec.CommandContext(ctx, spec.Path, spec.Args...)
	cmd.Dir = "/"
	cmd.Env = append([]string{
		"PATH=" + envOr("PATH", DefaultPath),
		"HOME=" + envOr("HOME", "/"),
	}, spec.Env...)
	newGroup(cmd)
	cmd.Cancel = func() error { return killGroup(cmd) }
	cmd.WaitDelay = waitStop
	return cmd
}

// start starts cmd and, when max > 0, reads up to max bytes of its stdout,
// killing the group when it prints more.
func start(cmd *exec.Cmd, max int) (out []byte, tooBig bool, readErr, err error) {
	if max <= 0 {
		return nil, false, nil, cmd.Start()
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, false, nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, false, nil, err
	}
	out, readErr = io.ReadAll(io.LimitReader(stdout, int64(max)+1))
	if tooBig = len(out) > max; tooBig {
		_ = killGroup(cmd)
	}
	return out, tooBig, readErr, nil
}

func classify(ctx, runCtx context.Context, waitErr error, tooBig bool, res *Result) {
	var ee *exec.ExitError
	switch {
	case ctx.Err() != nil:
		res.Outcome, res.Err = Cancelled, ctx.Err()
	case runCtx.Err() != nil:
		res.Outcome = TimedOut
	case tooBig:
		res.Outcome = TooMuchOutput
	case errors.As(waitErr, &ee):
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			res.Outcome, res.Signal = Signaled, ws.Signal()
			return
		}
		res.Outcome, res.ExitCode = Exited, ee.ExitCode()
	default:
		res.Outcome = Unclean
	}
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
