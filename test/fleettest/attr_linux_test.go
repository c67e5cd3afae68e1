//go:build linux

package fleettest

import "syscall"

// childAttr makes a child process die with the test binary: a suite killed
// by its timeout leaves no worker or redis-server behind.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
