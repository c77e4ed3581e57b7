//go:build unix

package sandbox

import (
	"fmt"
	"os/exec"
	"syscall"
)

// dataSlack is what a worker may map beyond its Go memory limit: the runtime's own
// structures, goroutine stacks, the binary's data.
const dataSlack = 512 << 20

// limitData caps the worker's writable private memory (RLIMIT_DATA, which Linux applies
// to anonymous mappings, so to Go's heap as it grows but not to address space merely
// reserved), so that an allocation the soft memory limit cannot hold back ends the
// worker with "out of memory", not the machine. Not under the race detector, whose
// shadow memory is far larger.
func limitData(memoryLimit int64) error {
	if raceEnabled {
		return nil
	}
	lim := uint64(memoryLimit) + dataSlack
	if err := syscall.Setrlimit(syscall.RLIMIT_DATA, &syscall.Rlimit{Cur: lim, Max: lim}); err != nil {
		return fmt.Errorf("limiting the data segment to %d bytes: %w", lim, err)
	}
	return nil
}

// setProcessGroup starts the worker in a process group of its own.
func setProcessGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
}

// killGroup kills the worker's process group: the worker and anything it started.
func killGroup(cmd *exec.Cmd) {
	if cmd.Process == nil {
		return
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	_ = cmd.Process.Kill()
}
