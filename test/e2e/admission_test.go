package e2e

import (
	"context"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	corev1alpha1 "github.com/compositor-dev/compositor/api/core/v1alpha1"
	"github.com/compositor-dev/compositor/chartfetch"
	"github.com/compositor-dev/compositor/cmd/compositor/app"
	"github.com/compositor-dev/compositor/test/controlplane"
	"github.com/compositor-dev/compositor/webhooks"
)

// startCompositor runs `compositor serve` in this process against cp, with its
// webhooks on loopback and the options changed by each of tweaks, and waits until the
// API server has its webhooks. stop stops it, as the test's end does.
func startCompositor(t testing.TB, cp *controlplane.ControlPlane, tweaks ...func(*app.ServeOptions)) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	opts := app.NewServeOptions()
	opts.HealthProbeAddr, opts.MetricsAddr = "0", "0"
	opts.WebhookAddr = freePort(t)
	opts.WebhookURL = "https://" + opts.WebhookAddr
	// The tests serve their charts on loopback, which Compositor refuses by default.
	opts.AllowChartNetworks = chartfetch.LoopbackNetworks()
	// Only the API server is heard, as on a cluster that gives it a client certificate.
	if cp.WebhookClient != nil {
		opts.WebhookClientCA = cp.WebhookClient.CAFile
	}
	for _, tweak := range tweaks {
		tweak(opts)
	}
	// The namespace may be there already: installed with the deployment chart.
	require.NoError(t, client.IgnoreAlreadyExists(cp.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: opts.Namespace}})))

	var serveErr error
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		serveErr = app.RunServe(ctx, cp.Config, opts)
	}()
	stop = sync.OnceFunc(func() {
		cancel()
		<-stopped
		assert.NoError(t, serveErr, "compositor serve")
	})
	t.Cleanup(stop)

	require.EventuallyWithT(t, func(c *assert.CollectT) {
		select {
		case <-stopped:
			c.Errorf("compositor serve stopped: %v", serveErr)
			return
		default:
		}
		for _, obj := range []client.Object{&admissionregistrationv1.MutatingWebhookConfiguration{}, &admissionregistrationv1.ValidatingWebhookConfiguration{}} {
			assert.NoError(c, cp.Client.Get(ctx, client.ObjectKey{Name: webhooks.ConfigurationName}, obj))
		}
	}, time.Minute, 100*time.Millisecond)
	return stop
}

func fixture(name string) string {
	return filepath.Join(controlplane.RepoRoot(), "test", "testdata", "fixtures", name)
}

func getComposition(t *testing.T, cp *controlplane.ControlPlane, namespace, name string) *unstructured.Unstructured {
	t.Helper()
	obj := &unstructured.Unstructured{}
	obj.SetAPIVersion("composition.krateo.io/v1-1-5")
	obj.SetKind("DemoApp")
	require.NoError(t, cp.Client.Get(context.Background(), client.ObjectKey{Namespace: namespace, Name: name}, obj))
	return obj
}

func TestAdmissionDefaultsAndGuardsCompositions(t *testing.T) {
	cp := controlplane.Start(t)
	startCompositor(t, cp)
	repo := sampleRepository(t)
	ctx := context.Background()

	res := cp.Kubectl(ctx, "", "apply", "-f", fixture("demoapps-crd.yaml"))
	require.NoError(t, res.Err, res.Stderr)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		res := cp.Kubectl(ctx, "", "get", "demoapps")
		assert.NoError(c, res.Err, res.Stderr)
	}, time.Minute, 100*time.Millisecond)

	t.Run("defaults", func(t *testing.T) {
		res := cp.Kubectl(ctx, "", "apply", "-f", fixture("demoapp.yaml"))
		require.NoError(t, res.Err, res.Stderr)
		obj := getComposition(t, cp, "default", "demo")
		assert.Equal(t, "demo", obj.GetAnnotations()["krateo.io/release-name"])
		assert.Equal(t, "false", obj.GetAnnotations()["krateo.io/paused"])
		assert.Equal(t, "v1-1-5", obj.GetLabels()["krateo.io/composition-version"])
		assert.Equal(t, map[string]any{"replicaCount": int64(2)}, obj.Object["spec"], "spec is never defaulted")
	})

	t.Run("release name is immutable", func(t *testing.T) {
		res := cp.Kubectl(ctx, "", "annotate", "--overwrite", "demoapp", "demo", "krateo.io/release-name=other")
		require.Error(t, res.Err)
		assert.Equal(t, `The DemoApp "demo" is invalid: metadata.annotations[krateo.io/release-name]: Invalid value: "other": field is immutable: the Helm release is "demo"`+"\n", res.Stderr)
		assert.Equal(t, "demo", getComposition(t, cp, "default", "demo").GetAnnotations()["krateo.io/release-name"])
	})

	t.Run("release names are unique in a namespace", func(t *testing.T) {
		res := cp.Kubectl(ctx, `apiVersion: composition.krateo.io/v1-1-5
kind: DemoApp
metadata:
  name: copycat
  namespace: default
  annotations:
    krateo.io/release-name: demo
spec: {}
`, "apply", "-f", "-")
		require.Error(t, res.Err)
		assert.Contains(t, res.Stderr, `metadata.annotations[krateo.io/release-name]: Invalid value: "demo": already used by DemoApp default/demo`)
	})

	t.Run("the definition's release name is the default", func(t *testing.T) {
		// Paused, so that the reconciler leaves the status this test writes alone.
		def := &corev1alpha1.CompositionDefinition{
			ObjectMeta: metav1.ObjectMeta{Name: "demoapp", Namespace: "default", Annotations: map[string]string{
				"krateo.io/release-name": "shared-release",
				"krateo.io/paused":       "true",
			}},
			Spec: corev1alpha1.CompositionDefinitionSpec{Chart: corev1alpha1.ChartInfo{URL: repo.URL, Repo: "fireworks-app", Version: "1.1.5"}},
		}
		require.NoError(t, cp.Client.Create(ctx, def))
		require.NoError(t, cp.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "other"}}))
		before := def.DeepCopy()
		def.Status.APIVersion, def.Status.Kind, def.Status.Resource = "composition.krateo.io/v1-1-5", "DemoApp", "demoapps"
		require.NoError(t, cp.Client.Status().Patch(ctx, def, client.MergeFrom(before)))

		require.EventuallyWithT(t, func(c *assert.CollectT) {
			res := cp.Kubectl(ctx, "apiVersion: composition.krateo.io/v1-1-5\nkind: DemoApp\nmetadata: {name: from-definition, namespace: other}\nspec: {}\n", "create", "-f", "-", "--dry-run=server", "-o", "jsonpath={.metadata.annotations.krateo\\.io/release-name}")
			assert.NoError(c, res.Err, res.Stderr)
			assert.Equal(c, "shared-release", res.Stdout)
		}, 30*time.Second, 200*time.Millisecond, "the webhook reads definitions from a cache that catches up")
	})

	t.Run("deleting a paused composition warns", func(t *testing.T) {
		res := cp.Kubectl(ctx, "", "annotate", "--overwrite", "demoapp", "demo", "krateo.io/paused=true")
		require.NoError(t, res.Err, res.Stderr)
		res = cp.Kubectl(ctx, "", "delete", "demoapp", "demo")
		require.NoError(t, res.Err, res.Stderr)
		assert.Contains(t, res.Stderr, `Warning: DemoApp default/demo is paused: its deletion waits until krateo.io/paused is "false"`)
	})

	t.Run("a definition is deleted only when no composition needs it", func(t *testing.T) {
		res := cp.Kubectl(ctx, "apiVersion: composition.krateo.io/v1-1-5\nkind: DemoApp\nmetadata: {name: keeper, namespace: default}\nspec: {}\n", "create", "-f", "-")
		require.NoError(t, res.Err, res.Stderr)
		res = cp.Kubectl(ctx, "", "delete", "compositiondefinition", "demoapp")
		require.Error(t, res.Err)
		assert.Contains(t, res.Stderr, `compositiondefinitions.core.krateo.io "demoapp" is forbidden: metadata.name: Forbidden: 1 DemoApp of version v1-1-5 still exist and no other definition serves that version: delete them first (kubectl delete demoapps.v1-1-5.composition.krateo.io --all -A)`)

		res = cp.Kubectl(ctx, "", "delete", "demoapp", "keeper")
		require.NoError(t, res.Err, res.Stderr)
		res = cp.Kubectl(ctx, "", "delete", "compositiondefinition", "demoapp")
		require.NoError(t, res.Err, res.Stderr)
	})

	t.Run("core objects never pass Compositor's webhooks", func(t *testing.T) {
		for _, name := range []string{webhooks.ConfigurationName} {
			m := &admissionregistrationv1.MutatingWebhookConfiguration{}
			require.NoError(t, cp.Client.Get(ctx, client.ObjectKey{Name: name}, m))
			v := &admissionregistrationv1.ValidatingWebhookConfiguration{}
			require.NoError(t, cp.Client.Get(ctx, client.ObjectKey{Name: name}, v))
			for _, rule := range append(m.Webhooks[0].Rules, v.Webhooks[0].Rules...) {
				for _, group := range rule.APIGroups {
					assert.True(t, strings.HasSuffix(group, ".krateo.io") || group == "policy.compositor.dev", group)
				}
			}
			assert.NotEmpty(t, m.Webhooks[0].ClientConfig.CABundle)
		}
	})
}
