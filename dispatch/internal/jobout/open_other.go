//go:build !unix

package jobout

import (
	"fmt"
	"os"
)

// openNoFollow refuses a link, then opens path; where the system has no
// O_NOFOLLOW the container has exited by the time the host reads.
func openNoFollow(path string) (*os.File, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s", fi.Mode().Type())
	}
	return os.Open(path)
}
