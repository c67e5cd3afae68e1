//go:build unix

package entrypoint

import (
	"syscall"
	"testing"
)

// mkfifo makes a FIFO at path: opening one for reading would block until a
// writer came, so the entrypoint must refuse it before it opens it.
func mkfifo(t *testing.T, path string) {
	t.Helper()
	if err := syscall.Mkfifo(path, 0o644); err != nil {
		t.Skip("no FIFO here:", err)
	}
}
