package leasetest

import (
	"os/exec"
	"syscall"
)

// dieWithParent has the kernel kill the server when the process that
// started it dies without stopping it (a panicking test, a killed go
// test): orphaned servers would otherwise outlive the run.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
