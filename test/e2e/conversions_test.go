package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	corev1alpha1 "github.com/compositor-dev/compositor/api/core/v1alpha1"
	"github.com/compositor-dev/compositor/cmd/compositor/app"
	"github.com/compositor-dev/compositor/test/controlplane"
)

// TestUpgradeAppliesDeclaredConversions follows the README's upgrade of a definition
// from chart 1.1.5 to 2.0.0 with compositions that asked for each Service type. Chart
// 2.0.0 declares that service.type became exposure (its values.conversions.yaml), so
// the upgraded releases render what the users asked for: an Ingress for LoadBalancer
// and NodePort, none for ClusterIP. The definition's status shows what the
// acknowledged rule loses; a rule that does not compile is refused at kubectl apply.
func TestUpgradeAppliesDeclaredConversions(t *testing.T) {
	cp := controlplane.Start(t)
	startCompositor(t, cp, func(o *app.ServeOptions) { o.Controllers = app.ControllersInProcess })
	repo := sampleRepository(t)
	ctx := context.Background()
	kubectl := func(stdin string, args ...string) {
		t.Helper()
		res := cp.Kubectl(ctx, stdin, args...)
		require.NoError(t, res.Err, "kubectl %v: %s", args, res.Stderr)
	}

	kubectl("", "create", "namespace", journeyNamespace)
	kubectl(definition(repo.URL, journeyNamespace, "fireworksapp", "1.1.5"), "apply", "-f", "-")
	kubectl("", "wait", "compositiondefinition", "fireworksapp", "-n", journeyNamespace, "--for", "condition=Ready=True", "--timeout", "120s")
	asked := map[string]string{"lb": "LoadBalancer", "np": "NodePort", "ci": "ClusterIP"}
	for name, serviceType := range asked {
		app := "apiVersion: composition.krateo.io/v1-1-5\nkind: FireworksApp\nmetadata: {name: " + name + ", namespace: " + journeyNamespace + "}\nspec: {service: {type: " + serviceType + "}}\n"
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			res := cp.Kubectl(ctx, app, "apply", "-f", "-")
			assert.NoError(c, res.Err, res.Stderr)
		}, time.Minute, 250*time.Millisecond)
	}
	releasesAt := func(chart string) {
		t.Helper()
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			releases := helmReleases(c, cp)
			for name := range asked {
				assert.Equal(c, chart, releases[name].Chart, name)
				assert.Equal(c, "deployed", releases[name].Status, name)
			}
		}, 3*time.Minute, 250*time.Millisecond)
	}
	releasesAt("fireworks-app-1.1.5")

	// A rule that does not compile is refused when it is written, naming the field.
	bad := definition(repo.URL, journeyNamespace, "fireworksapp", "2.0.0") +
		"  conversions:\n  - {from: 1.1.6, to: 2.0.0, rules: [{move: service..type, to: exposure}]}\n"
	res := cp.Kubectl(ctx, bad, "apply", "-f", "-")
	require.Error(t, res.Err)
	assert.Contains(t, res.Stderr, `spec.conversions[0].rules[0].move: Invalid value: "service..type": a path of the values has no empty keys`)

	kubectl(definition(repo.URL, journeyNamespace, "fireworksapp", "2.0.0"), "apply", "-f", "-")
	releasesAt("fireworks-app-2.0.0")
	for name, serviceType := range asked {
		want := map[string]string{"LoadBalancer": "public", "NodePort": "public", "ClusterIP": "internal"}[serviceType]
		assert.Equal(t, want, compositionField(t, cp, "v2-0-0", name, "{.spec.exposure}"), name)
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			err := cp.Client.Get(ctx, client.ObjectKey{Namespace: journeyNamespace, Name: name + "-fireworks-app"}, &networkingv1.Ingress{})
			if want == "public" {
				assert.NoError(c, err, "%s asked for %s: exposure public renders an Ingress", name, serviceType)
			} else {
				assert.True(c, apierrors.IsNotFound(err), "%s asked for ClusterIP: no Ingress, got %v", name, err)
			}
		}, time.Minute, 250*time.Millisecond)
	}

	def := &corev1alpha1.CompositionDefinition{}
	require.NoError(t, cp.Client.Get(ctx, client.ObjectKey{Namespace: journeyNamespace, Name: "fireworksapp"}, def))
	require.Len(t, def.Status.ConversionLosses, 1, "%+v", def.Status.ConversionLosses)
	loss := def.Status.ConversionLosses[0]
	assert.Equal(t, "service.type", loss.Path)
	assert.Equal(t, "1.1.6 → 2.0.0", loss.Step)
	assert.Contains(t, loss.Example, `"NodePort" comes back as "LoadBalancer"`)
}
