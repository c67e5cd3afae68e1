//go:build faultpoint && unix

package faultpoint

import (
	"os"
	"syscall"
)

// envCrashAt names the point a fault-injection build crashes at.
const envCrashAt = "PIDISPATCH_TEST_CRASH_AT"

var crashAt = os.Getenv(envCrashAt)

// Hit kills the process, as SIGKILL from outside would, when point is the
// one PIDISPATCH_TEST_CRASH_AT names.
func Hit(point string) {
	if crashAt == "" || point != crashAt {
		return
	}
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // the signal is on its way; nothing after this point runs
}
