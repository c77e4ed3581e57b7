package controller

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
)

// The controller reads its chart from Compositor's namespace, where the archives are
// kept, only when told that namespace.
func TestDeploymentChartArchiveNamespace(t *testing.T) {
	opts := fireworksOptions(definition(nil))
	assert.NotContains(t, container(Deployment(opts)).Args, "--chart-archive-namespace")

	opts.ChartArchiveNamespace = "compositor-system"
	args := container(Deployment(opts)).Args
	i := slices.Index(args, "--chart-archive-namespace")
	if assert.GreaterOrEqual(t, i, 0, args) && assert.Less(t, i+1, len(args)) {
		assert.Equal(t, "compositor-system", args[i+1])
	}
	assert.Equal(t, []string{"controller", "--group", "composition.krateo.io", "--version", "v1-1-5", "--resource", "fireworksapps"}, args[:7])
}
