//go:build !unix

package sandbox

import (
	"errors"
	"os"
	"os/exec"
)

// newGroup does nothing where there are no process groups: killGroup
// reaches the helper alone.
func newGroup(*exec.Cmd) {}

// killGroup kills the helper. A process already gone is fine.
func killGroup(cmd *exec.Cmd) error {
	if cmd.Process == nil {
		return nil
	}
	if err := cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	return nil
}
