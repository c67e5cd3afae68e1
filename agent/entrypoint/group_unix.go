//go:build unix

package entrypoint

import (
	"os/exec"
	"syscall"
	"time"
)

// newGroup makes cmd the leader of a process group of its own, so
// haltGroup reaches every process pi starts.
func newGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
}

// haltGroup sends SIGTERM to pi's process group, then SIGKILL after grace
// unless the group is gone.
func haltGroup(pid int, grace time.Duration) {
	_ = syscall.Kill(-pid, syscall.SIGTERM)
	deadline := time.Now().Add(grace)
	for time.Now().Before(deadline) {
		if syscall.Kill(-pid, 0) != nil {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	_ = syscall.Kill(-pid, syscall.SIGKILL)
}
