//go:build unix

package sandbox

import (
	"errors"
	"os/exec"
	"syscall"
)

// newGroup makes cmd the leader of a process group of its own, so
// killGroup reaches every process it starts.
func newGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
}

// killGroup SIGKILLs the helper's whole process group. ESRCH (already gone) is fine.
func killGroup(cmd *exec.Cmd) error {
	if cmd.Process == nil {
		return nil
	}
	if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return err
	}
	return nil
}
