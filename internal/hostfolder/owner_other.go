//go:build !unix

package hostfolder

import "os"

// Owner has no uid to give where files have none: the job keeps the
// image's user.
func Owner(path string) (string, error) {
	_, err := os.Stat(path)
	return "", err
}

// UID has no owner to read where files have none: no folder is root's.
func UID(path string) (uid uint32, ok bool) {
	_, err := os.Lstat(path)
	return ^uint32(0), err == nil
}
