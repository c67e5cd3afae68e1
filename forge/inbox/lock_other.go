//go:build !unix

package inbox

import "os"

// lockFile does nothing where flock(2) is missing: keep one receiver per
// spool folder by hand.
func lockFile(*os.File) error { return nil }

func unlockFile(*os.File) {}
