package dispatch

import (
	"context"
	"fmt"
	"time"

	"github.com/pidispatch/pidispatch/internal/check"
	"github.com/pidispatch/pidispatch/internal/sandbox"
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
	res := sandbox.Run(ctx, sandbox.Spec{
		Path: path, Args: args, Env: []string{WaitProfileEnv + "=" + profile}, Timeout: timeout,
	})
	switch res.Outcome {
	case sandbox.Exited:
		switch res.ExitCode {
		case 0:
			return checkMet, "", nil
		case 1:
			return checkNotYet, "", nil
		}
		return checkFault, fmt.Sprintf("exited with code %d", res.ExitCode), nil
	case sandbox.BadPath:
		return checkFault, "check path " + res.Rule, nil
	case sandbox.BadTimeout:
		return checkFault, "timeout must be positive", nil
	case sandbox.Cancelled:
		return checkFault, "", res.Err
	case sandbox.StartFailed:
		// exec's error names the path and the OS reason, never output.
		return checkFault, "cannot start: " + res.Err.Error(), nil
	case sandbox.TimedOut:
		return checkFault, fmt.Sprintf("timed out after %s (killed)", timeout), nil
	case sandbox.Signaled:
		return checkFault, "killed by signal " + res.Signal.String(), nil
	}
	return checkFault, "did not finish cleanly", nil
}
