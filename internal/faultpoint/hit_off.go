//go:build !faultpoint || !unix

package faultpoint

// Hit does nothing outside a fault-injection build.
func Hit(string) {}
