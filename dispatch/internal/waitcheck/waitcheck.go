// Package waitcheck runs a wait profile's check: the host's executable that
// tells whether one of a held job's conditions is met (package hold has the
// rules of holding).
package waitcheck

import (
	"context"
	"fmt"
	"time"

	"github.com/pidispatch/pidispatch/internal/check"
	"github.com/pidispatch/pidispatch/internal/sandbox"
)

// ProfileEnv carries the profile name to a wait check, so one executable can
// serve several profiles.
const ProfileEnv = "PI_WAIT_PROFILE"

// Result is what one run of a wait check said. The protocol: exit 0 met,
// exit 1 not yet, anything else (another code, a signal, a timeout, a check that
// cannot start) a fault.
type Result int

// The results of a check.
const (
	NotYet Result = iota
	Met
	Fault
)

func (r Result) String() string {
	switch r {
	case Met:
		return "met"
	case Fault:
		return "fault"
	}
	return "not-yet"
}

// Run runs a wait profile's check once, as a secret resolver runs: path
// (absolute and clean) with the job's args and no shell, stdin from /dev/null,
// stdout and stderr discarded (a check's output is never logged: it may echo
// what it read from a ticket system), the working directory "/", and a minimal
// environment: PATH and HOME (the worker's own) and PI_WAIT_PROFILE=<profile>. It
// runs in its own process group, killed when timeout passes or ctx ends, and
// again after it exits, so a check cannot leave a process behind.
//
// A fault carries a short reason (an exit code, a signal, a timeout), never
// output. The error is ctx's when ctx itself ended: nothing was learned.
func Run(ctx context.Context, path, profile string, args []string, timeout time.Duration) (Result, string, error) {
	if !check.Name(profile) {
		return Fault, "invalid profile name", nil
	}
	res := sandbox.Run(ctx, sandbox.Spec{
		Path: path, Args: args, Env: []string{ProfileEnv + "=" + profile}, Timeout: timeout,
	})
	switch res.Outcome {
	case sandbox.Exited:
		switch res.ExitCode {
		case 0:
			return Met, "", nil
		case 1:
			return NotYet, "", nil
		}
		return Fault, fmt.Sprintf("exited with code %d", res.ExitCode), nil
	case sandbox.BadPath:
		return Fault, "check path " + res.Rule, nil
	case sandbox.BadTimeout:
		return Fault, "timeout must be positive", nil
	case sandbox.Cancelled:
		return Fault, "", res.Err
	case sandbox.StartFailed:
		// exec's error names the path and the OS reason, never output.
		return Fault, "cannot start: " + res.Err.Error(), nil
	case sandbox.TimedOut:
		return Fault, fmt.Sprintf("timed out after %s (killed)", timeout), nil
	case sandbox.Signaled:
		return Fault, "killed by signal " + res.Signal.String(), nil
	}
	return Fault, "did not finish cleanly", nil
}
