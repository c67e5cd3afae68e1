//go:build unix

package dispatch

import (
	"fmt"
	"os"
	"syscall"
)

// folderOwner returns "UID:GID" of the folder at path.
func folderOwner(path string) (string, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return "", err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return "", nil
	}
	return fmt.Sprintf("%d:%d", st.Uid, st.Gid), nil
}
