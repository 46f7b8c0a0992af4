// Package proc pauses processes for fault tests.
package proc

import (
	"bytes"
	"fmt"
	"os"
	"syscall"
	"time"
)

// Stop pauses p (SIGSTOP) and returns once every thread of p has stopped,
// or after 5s. The signal is a request: on a loaded machine a
// process goes on running for a millisecond or more after kill returns
// (measured here with both cores busy: a child still took a timestamp
// 1.5 ms later), so a test that pauses a process and then acts on the
// pause (releases a key it would be handed, lets its lease run out) must
// wait for the stop. Where /proc cannot be read (not Linux), it returns
// after the signal.
func Stop(p *os.Process) error {
	if err := p.Signal(syscall.SIGSTOP); err != nil {
		return err
	}
	// A thread in uninterruptible sleep (disk I/O on a busy machine)
	// stops only when it returns from it.
	deadline := time.Now().Add(5 * time.Second)
	for !stopped(p.Pid) {
		if time.Now().After(deadline) {
			return fmt.Errorf("proc: process %d not stopped 5s after SIGSTOP", p.Pid)
		}
		time.Sleep(100 * time.Microsecond)
	}
	return nil
}

// stopped reports whether no thread of process pid can run: each is
// stopped (T, t), a zombie (Z) or dead (X), or the process is gone.
func stopped(pid int) bool {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return true // gone, or no /proc: nothing to wait for
	}
	for _, task := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, task.Name()))
		if err != nil {
			continue // the thread exited
		}
		// pid (comm) state ...: the state follows the last ')', since the
		// command name may hold any character.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 || i+2 >= len(b) {
			continue
		}
		switch b[i+2] {
		case 'T', 't', 'Z', 'X':
		default:
			return false
		}
	}
	return true
}
