//go:build unix

package inbox

import (
	"errors"
	"os"
	"syscall"
)

// lockFile takes an exclusive lock on f that ends with the process (or
// unlockFile): one receiver per spool folder. errLocked: another holds it.
func lockFile(f *os.File) error {
	err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	if errors.Is(err, syscall.EWOULDBLOCK) {
		return errLocked
	}
	return err
}

func unlockFile(f *os.File) { _ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN) }
