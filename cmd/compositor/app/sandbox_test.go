package app

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

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
