//go:build !unix

package entrypoint

import "testing"

func mkfifo(t *testing.T, path string) {
	t.Skip("no FIFOs on this system")
}
