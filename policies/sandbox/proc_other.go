//go:build !unix

package sandbox

import "os/exec"

// Elsewhere a worker is killed alone and its memory is bounded by its Go memory limit.

func limitData(int64) error { return nil }

func setProcessGroup(*exec.Cmd) {}

func killGroup(cmd *exec.Cmd) {
	if cmd.Process != nil {
		_ = cmd.Process.Kill()
	}
}
