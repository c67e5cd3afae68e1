//go:build unix

package hostfolder

import (
	"fmt"
	"os"
	"syscall"
)

// Owner returns "UID:GID" of the folder at path.
func Owner(path string) (string, error) {
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

// UID is the uid owning the folder at path (not following a final
// symlink); ok is false when it cannot be read.
func UID(path string) (uid uint32, ok bool) {
	fi, err := os.Lstat(path)
	if err != nil {
		return 0, false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return st.Uid, true
}
