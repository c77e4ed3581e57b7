package e2e

import (
	"os"
	"testing"

	"github.com/compositor-dev/compositor/policies/sandbox"
)

func TestMain(m *testing.M) {
	// RunServe in this process starts its sandbox workers from this binary.
	sandbox.Main()
	code := m.Run()
	if buildDir != "" {
		_ = os.RemoveAll(buildDir)
	}
	os.Exit(code)
}
