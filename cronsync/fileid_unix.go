//go:build unix

package cronsync

import (
	"os"
	"syscall"
)

// fileID is the file's inode: a rename-replace keeps size and may keep mtime,
// but never the inode.
func fileID(fi os.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return uint64(st.Ino)
	}
	return 0
}
