package dispatch

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"syscall"
	"time"

	"github.com/pidispatch/pidispatch/internal/check"
)

// WaitProfileEnv carries the profile name to a wait check, so one executable can
// serve several profiles.
const WaitProfileEnv = "PI_WAIT_PROFILE"

// checkResult is what one run of a wait check said. The protocol: exit 0 met,
// exit 1 not yet, anything else (another code, a signal, a timeout, a check that
// cannot start) a fault.
type checkResult int

const (
	checkNotYet checkResult = iota
	checkMet
	checkFault
)

func (r checkResult) String() string {
	switch r {
	case checkMet:
		return "met"
	case checkFault:
		return "fault"
	}
	return "not-yet"
}

// runWaitCheck runs a wait profile's check once, as a secret resolver runs: path
// (absolute and clean) with the job's args and no shell, stdin from /dev/null,
// stdout and stderr discarded (a check's output is never logged: it may echo
// what it read from a ticket system), the working directory "/", and a minimal
// environment: PATH and HOME (the worker's own) and PI_WAIT_PROFILE=<profile>. It
// runs in its own process group, killed when timeout passes or ctx ends, and
// again after it exits, so a check cannot leave a process behind.
//
// A fault carries a short reason (an exit code, a signal, a timeout), never
// output. The error is ctx's when ctx itself ended: nothing was learned.
func runWaitCheck(ctx context.Context, path, profile string, args []string, timeout time.Duration) (checkResult, string, error) {
	if !check.Name(profile) {
		return checkFault, "invalid profile name", nil
	}
	if rule := check.AbsClean(path); rule != "" {
		return checkFault, "check path " + rule, nil
	}
	if timeout <= 0 {
		return checkFault, "timeout must be positive", nil
	}
	if err := ctx.Err(); err != nil {
		return checkFault, "", err
	}
	runCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(runCtx, path, args...)
	cmd.Dir = "/"
	cmd.Env = []string{
		"PATH=" + envOr("PATH", defaultPath),
		"HOME=" + envOr("HOME", "/"),
		WaitProfileEnv + "=" + profile,
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return killGroup(cmd) }
	cmd.WaitDelay = resolverWaitStop
	if err := cmd.Start(); err != nil {
		// exec's error names the path and the OS reason, never output.
		return checkFault, "cannot start: " + err.Error(), nil
	}
	waitErr := cmd.Wait()
	_ = killGroup(cmd) // stragglers that outlived the check

	if waitErr == nil {
		return checkMet, "", nil
	}
	switch {
	case ctx.Err() != nil:
		return checkFault, "", ctx.Err()
	case runCtx.Err() != nil:
		return checkFault, fmt.Sprintf("timed out after %s (killed)", timeout), nil
	}
	var ee *exec.ExitError
	if errors.As(waitErr, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return checkFault, "killed by signal " + ws.Signal().String(), nil
		}
		if ee.ExitCode() == 1 {
			return checkNotYet, "", nil
		}
		return checkFault, fmt.Sprintf("exited with code %d", ee.ExitCode()), nil
	}
	return checkFault, "did not finish cleanly", nil
}
