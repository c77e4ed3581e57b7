package controller

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"

	corev1alpha1 "github.com/compositor-dev/compositor/api/core/v1alpha1"
	"github.com/compositor-dev/compositor/api/vocab"
	"github.com/compositor-dev/compositor/generators/rbac"
	"github.com/compositor-dev/compositor/test/golden"
)

// definition is the seed manifest's definition of fireworks-app 1.1.5.
func definition(annotations map[string]string) *corev1alpha1.CompositionDefinition {
	return &corev1alpha1.CompositionDefinition{
		ObjectMeta: metav1.ObjectMeta{
			Name: "fireworksapp-1-1-5", Namespace: "fireworksapp-system",
			UID: "6f1c2f4e-8f1a-4c36-9a55-0d9c1f1d2b7e", Annotations: annotations,
		},
		Spec: corev1alpha1.CompositionDefinitionSpec{Chart: corev1alpha1.ChartInfo{
			URL: "https://charts.krateo.io", Repo: "fireworks-app", Version: "1.1.5",
		}},
	}
}

func fireworksOptions(def *corev1alpha1.CompositionDefinition) Options {
	return Options{Definition: def, Namespace: "compositor-system", Plural: "fireworksapps", Version: "v1-1-5"}
}

func TestGoldenFireworksApp(t *testing.T) {
	b, err := yaml.Marshal(Deployment(fireworksOptions(definition(nil))))
	require.NoError(t, err)
	golden.Check(t, "fireworks-app-1.1.5.deployment.yaml", b)
}

func container(d *appsv1.Deployment) corev1.Container { return d.Spec.Template.Spec.Containers[0] }

func TestDeployment(t *testing.T) {
	def := definition(nil)
	d := Deployment(fireworksOptions(def))

	assert.Equal(t, rbac.ServiceAccountName("fireworksapp-system", "fireworksapps", "v1-1-5"), d.Name)
	assert.Equal(t, "compositor-system", d.Namespace, "in Compositor's namespace, which no tenant writes")
	assert.Empty(t, d.OwnerReferences, "no owner reference across namespaces: the identity labels name the definition")

	pod := d.Spec.Template.Spec
	assert.Equal(t, rbac.ServiceAccountName("fireworksapp-system", "fireworksapps", "v1-1-5"), pod.ServiceAccountName, "runs as the generated ServiceAccount")
	assert.Equal(t, int32(1), *d.Spec.Replicas)
	assert.Equal(t, appsv1.RecreateDeploymentStrategyType, d.Spec.Strategy.Type, "two controllers never run Helm on one release")
	c := container(d)
	assert.Equal(t, DefaultImage, c.Image)
	assert.Equal(t, []string{"compositor"}, c.Command)
	assert.Equal(t, []string{"controller", "--group", "composition.krateo.io", "--version", "v1-1-5", "--resource", "fireworksapps",
		"--namespace", "fireworksapp-system", "--health-probe-bind-address", ":8081", "--metrics-bind-address", ":8080"}, c.Args)
	assert.NotContains(t, c.Env, corev1.EnvVar{Name: "CORE_PROVIDER_DEBUG", Value: "true"})

	selector, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
	require.NoError(t, err)
	assert.True(t, selector.Matches(labels.Set(d.Spec.Template.Labels)), "the selector selects the template")
	for k, v := range rbac.IdentityLabels("fireworksapp-system", "fireworksapps", "v1-1-5") {
		assert.Equal(t, v, d.Labels[k])
		assert.Equal(t, v, d.Spec.Template.Labels[k])
	}
	assert.Equal(t, def.Name, d.Labels[vocab.LabelDefinitionName])

	// Hardening, container by container.
	assert.True(t, *pod.SecurityContext.RunAsNonRoot)
	assert.Equal(t, corev1.SeccompProfileTypeRuntimeDefault, pod.SecurityContext.SeccompProfile.Type)
	sc := c.SecurityContext
	assert.False(t, *sc.AllowPrivilegeEscalation)
	assert.True(t, *sc.ReadOnlyRootFilesystem)
	assert.True(t, *sc.RunAsNonRoot)
	assert.Equal(t, []corev1.Capability{"ALL"}, sc.Capabilities.Drop)
	assert.Empty(t, sc.Capabilities.Add)
	assert.Equal(t, []corev1.VolumeMount{{Name: "tmp", MountPath: "/tmp"}}, c.VolumeMounts)
	require.Len(t, pod.Volumes, 1)
	assert.NotNil(t, pod.Volumes[0].EmptyDir)
	assert.Equal(t, "/healthz", c.LivenessProbe.HTTPGet.Path)
	assert.Equal(t, "/readyz", c.ReadinessProbe.HTTPGet.Path)
	assert.Equal(t, "health", c.LivenessProbe.HTTPGet.Port.StrVal)
	assert.False(t, c.Resources.Requests.Cpu().IsZero())
	assert.False(t, c.Resources.Limits.Memory().IsZero())
}

func TestDeploymentOptions(t *testing.T) {
	limits := corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}}
	opts := fireworksOptions(definition(map[string]string{vocab.AnnotationConnectorVerbose: "true"}))
	opts.Group = "example.compositor.dev"
	opts.Image = "registry.local/compositor:v1.2.3"
	opts.ImagePullPolicy = corev1.PullIfNotPresent
	opts.Resources = &limits
	opts.Labels = map[string]string{"team": "blue", vocab.LabelVersion: "ignored"}
	opts.AllowChartNetworks = []netip.Prefix{netip.MustParsePrefix("10.20.0.0/16"), netip.MustParsePrefix("fd00:1::/64")}
	d := Deployment(opts)

	c := container(d)
	assert.Contains(t, c.Env, corev1.EnvVar{Name: "CORE_PROVIDER_DEBUG", Value: "true"}, "verbose definition")
	assert.Equal(t, "registry.local/compositor:v1.2.3", c.Image)
	assert.Equal(t, corev1.PullIfNotPresent, c.ImagePullPolicy)
	assert.Equal(t, limits, c.Resources)
	assert.Equal(t, "example.compositor.dev", c.Args[2])
	assert.Equal(t, []string{"--allow-chart-network", "10.20.0.0/16", "--allow-chart-network", "fd00:1::/64"}, c.Args[len(c.Args)-4:],
		"the controller may fetch from the ranges Compositor may")
	assert.Equal(t, "blue", d.Labels["team"])
	assert.Equal(t, "blue", d.Spec.Template.Labels["team"])
	assert.Equal(t, "v1-1-5", d.Labels[vocab.LabelVersion], "identity labels win")
	assert.Equal(t, SelectorLabels("fireworksapp-system", "fireworksapps", "v1-1-5"), d.Spec.Selector.MatchLabels, "user labels never reach the immutable selector")

	limits.Limits[corev1.ResourceCPU] = resource.MustParse("1")
	assert.NotContains(t, c.Resources.Limits, corev1.ResourceCPU, "the options are copied")

	quiet := Deployment(fireworksOptions(definition(map[string]string{vocab.AnnotationConnectorVerbose: "false"})))
	assert.NotContains(t, container(quiet).Env, corev1.EnvVar{Name: "CORE_PROVIDER_DEBUG", Value: "true"})
}

// Without Compositor's namespace (the layout before identities moved), the Deployment
// is the definition's, owned by it.
func TestDeploymentInTheDefinitionNamespace(t *testing.T) {
	def := definition(nil)
	opts := fireworksOptions(def)
	opts.Namespace = ""
	d := Deployment(opts)
	assert.Equal(t, "fireworksapp-system", d.Namespace)
	assert.Equal(t, []metav1.OwnerReference{{
		APIVersion: "core.krateo.io/v1alpha1", Kind: "CompositionDefinition", Name: def.Name, UID: def.UID,
		Controller: ptrTrue(), BlockOwnerDeletion: ptrTrue(),
	}}, d.OwnerReferences)
}

func ptrTrue() *bool { v := true; return &v }
