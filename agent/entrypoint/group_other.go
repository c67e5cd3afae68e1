//go:build !unix

package entrypoint

import (
	"os"
	"os/exec"
	"time"
)

// newGroup does nothing where there are no process groups: haltGroup
// reaches pi alone.
func newGroup(*exec.Cmd) {}

// haltGroup kills pi; without signals there is no polite stop to wait on.
func haltGroup(pid int, _ time.Duration) {
	if p, err := os.FindProcess(pid); err == nil {
		_ = p.Kill()
	}
}
