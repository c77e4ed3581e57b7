package app

import (
	"testing"
	"time"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	corev1alpha1 "github.com/compositor-dev/compositor/api/core/v1alpha1"
	"github.com/compositor-dev/compositor/generators/controller"
)

func parseController(t *testing.T, args []string, env map[string]string) (*ControllerOptions, error) {
	t.Helper()
	opts := NewControllerOptions()
	fs := pflag.NewFlagSet("controller", pflag.ContinueOnError)
	opts.AddFlags(fs)
	require.NoError(t, fs.Parse(args))
	if err := applyEnv(fs, func(name string) (string, bool) { v, ok := env[name]; return v, ok }); err != nil {
		return opts, err
	}
	return opts, opts.Validate()
}

// The generated Deployment's arguments are exactly what the command accepts.
func TestControllerAcceptsTheGeneratedDeploymentArgs(t *testing.T) {
	def := &corev1alpha1.CompositionDefinition{ObjectMeta: metav1.ObjectMeta{Name: "fireworksapp-1-1-5", Namespace: "fireworksapp-system", UID: "uid"}}
	deployment := controller.Deployment(controller.Options{
		Definition: def, Plural: "fireworksapps", Version: "v1-1-5",
		ChartArchiveNamespace: "compositor-system", ReleaseSealNamespace: "compositor-system",
	})
	container := deployment.Spec.Template.Spec.Containers[0]
	require.Equal(t, "controller", container.Args[0])
	env := map[string]string{}
	for _, e := range container.Env {
		env[e.Name] = e.Value
	}

	opts, err := parseController(t, container.Args[1:], env)
	require.NoError(t, err)
	assert.Equal(t, "composition.krateo.io", opts.Group)
	assert.Equal(t, "v1-1-5", opts.Version)
	assert.Equal(t, "fireworksapps", opts.Resource)
	assert.Equal(t, ":8081", opts.HealthProbeAddr)
	assert.Equal(t, ":8080", opts.MetricsAddr)
	assert.Equal(t, "compositor-system", opts.ChartArchiveNamespace)
	assert.Equal(t, "compositor-system", opts.ReleaseSealNamespace)
}

func TestControllerOptionsFromEnvironmentAndErrors(t *testing.T) {
	opts, err := parseController(t, []string{"--group", "g", "--version", "v1", "--resource", "rs"},
		map[string]string{"CORE_PROVIDER_SYNC": "10m", "CORE_PROVIDER_DEBUG": "true", "POD_NAMESPACE": "team-a",
			"COMPOSITOR_RELEASE_SEAL_NAMESPACE": "compositor-system"})
	require.NoError(t, err)
	assert.Equal(t, 10*time.Minute, opts.Sync)
	assert.True(t, opts.Debug)
	assert.Equal(t, "team-a", opts.Namespace)
	assert.Equal(t, "compositor-system", opts.ReleaseSealNamespace)

	_, err = parseController(t, []string{"--max-reconcile-rate", "0"}, nil)
	require.Error(t, err)
	for _, want := range []string{"--group is required", "--version is required", "--resource is required", "--max-reconcile-rate must be at least 1",
		"--release-seal-namespace is required"} {
		assert.ErrorContains(t, err, want)
	}
}
