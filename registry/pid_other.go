//go:build !unix

package registry

// processGone cannot check a pid here, so it reports every holder as running:
// a restart then waits for the crashed holder's claim to expire instead of
// taking over a name a live process might hold.
func processGone(pid int) bool { return pid <= 0 }
