//go:build !linux

package fleettest

import "syscall"

// childAttr: only Linux can tie a child's life to its parent's; elsewhere the
// cleanups alone stop the children.
func childAttr() *syscall.SysProcAttr { return nil }
