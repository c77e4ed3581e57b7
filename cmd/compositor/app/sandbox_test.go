package app

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/compositor-dev/compositor/policies/sandbox"
)

// `compositor sandbox-worker` exists for serve and dev to start, and stays out of help.
func TestSandboxWorkerIsHidden(t *testing.T) {
	root := NewCommand()
	cmd, _, err := root.Find([]string{sandbox.Subcommand})
	require.NoError(t, err)
	assert.Equal(t, sandbox.Subcommand, cmd.Name())
	assert.True(t, cmd.Hidden)
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetArgs([]string{"--help"})
	require.NoError(t, root.Execute())
	assert.NotContains(t, out.String(), sandbox.Subcommand)
	assert.Contains(t, out.String(), "serve")
}

// The workers are counted on /metrics.
func TestSandboxMetrics(t *testing.T) {
	pool, err := sandbox.NewPool(sandbox.Options{})
	require.NoError(t, err)
	registerSandboxMetrics(pool)
	families, err := ctrlmetrics.Registry.Gather()
	require.NoError(t, err)
	var names []string
	for _, f := range families {
		if strings.HasPrefix(f.GetName(), "compositor_sandbox_") {
			names = append(names, f.GetName())
		}
	}
	assert.ElementsMatch(t, []string{"compositor_sandbox_workers", "compositor_sandbox_workers_killed_total", "compositor_sandbox_workers_started_total"}, names)
}
