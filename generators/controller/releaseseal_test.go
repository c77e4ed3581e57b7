package controller

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
)

// The controller is told the namespace of the release seal Secret, and reads it there
// through its live client: the pod mounts no Secret (the chart's admission policy
// allows the generated controllers emptyDir volumes only).
func TestDeploymentReleaseSealNamespace(t *testing.T) {
	opts := fireworksOptions(definition(nil))
	assert.NotContains(t, container(Deployment(opts)).Args, "--release-seal-namespace")

	opts.ReleaseSealNamespace = "compositor-system"
	opts.ChartArchiveNamespace = "compositor-system"
	d := Deployment(opts)
	args := container(d).Args
	i := slices.Index(args, "--release-seal-namespace")
	if assert.GreaterOrEqual(t, i, 0, args) && assert.Less(t, i+1, len(args)) {
		assert.Equal(t, "compositor-system", args[i+1])
	}
	assert.Equal(t, 1, countOf(args, "--release-seal-namespace"))
	assert.Equal(t, []string{"controller", "--group", "composition.krateo.io", "--version", "v1-1-5", "--resource", "fireworksapps"}, args[:7])
	assert.Contains(t, args, "--chart-archive-namespace")
	for _, arg := range args {
		assert.NotContains(t, arg, "release-seal-file")
	}

	pod := d.Spec.Template.Spec
	require.Len(t, pod.Volumes, 1)
	assert.NotNil(t, pod.Volumes[0].EmptyDir, "emptyDir only")
	assert.Equal(t, []corev1.VolumeMount{{Name: "tmp", MountPath: "/tmp"}}, container(d).VolumeMounts)
	assert.Equal(t, "compositor-release-seal", ReleaseSealSecret)
}

func countOf(list []string, s string) int {
	n := 0
	for _, v := range list {
		if v == s {
			n++
		}
	}
	return n
}
