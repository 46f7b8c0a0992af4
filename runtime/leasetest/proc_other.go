//go:build !linux

package leasetest

import "os/exec"

// dieWithParent does nothing where the kernel offers no parent-death
// signal: a server outlives a test process that dies without stopping it.
func dieWithParent(*exec.Cmd) {}
