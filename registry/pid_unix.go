//go:build unix

package registry

import (
	"errors"
	"syscall"
)

// processGone reports whether no process with pid runs on this machine. Signal
// 0 checks existence without signalling; EPERM means it exists under another
// user. A pid of 0 or below names a process group, never a holder: it is gone.
func processGone(pid int) bool {
	if pid <= 0 {
		return true
	}
	return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}
