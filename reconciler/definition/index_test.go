package definition

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	corev1alpha1 "github.com/compositor-dev/compositor/api/core/v1alpha1"
	"github.com/compositor-dev/compositor/api/vocab"
	"github.com/compositor-dev/compositor/test/controlplane"
)

// TestEventsFindTheirDefinitionsThroughIndexes: a Secret's event finds the definitions
// whose chart credentials name it, and a managed CRD's event the definition that
// generates it, through the cache's indexes, and nothing else: a thousand definitions
// and ten thousand Helm release Secrets make these the hot path.
func TestEventsFindTheirDefinitionsThroughIndexes(t *testing.T) {
	cp := controlplane.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	c, err := cache.New(cp.Config, cache.Options{Scheme: cp.Client.Scheme()})
	require.NoError(t, err)
	require.NoError(t, indexDefinitions(ctx, c))
	go func() { _ = c.Start(ctx) }()
	require.True(t, c.WaitForCacheSync(ctx))

	require.NoError(t, cp.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team"}}))
	newDefinition := func(name string, credentials *corev1alpha1.Credentials, resource string) {
		def := &corev1alpha1.CompositionDefinition{
			ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: name},
			Spec:       corev1alpha1.CompositionDefinitionSpec{Chart: corev1alpha1.ChartInfo{URL: "https://charts.example/" + name, Version: "1.0.0", Repo: name, Credentials: credentials}},
		}
		require.NoError(t, cp.Client.Create(ctx, def))
		if resource != "" {
			def.Status.Resource = resource
			require.NoError(t, cp.Client.Status().Update(ctx, def))
		}
	}
	password := func(secret string) *corev1alpha1.Credentials {
		return &corev1alpha1.Credentials{Username: "u", PasswordRef: corev1alpha1.SecretKeySelector{Namespace: "team", Name: secret, Key: "password"}}
	}
	newDefinition("a", password("repo-password"), "apps")
	newDefinition("b", password("repo-password"), "")
	newDefinition("c", password("other"), "caches")
	newDefinition("d", nil, "")

	cached, err := client.New(cp.Config, client.Options{Scheme: cp.Client.Scheme(), Cache: &client.CacheOptions{Reader: c}})
	require.NoError(t, err)
	r := &Reconciler{Client: cached}
	request := func(name string) reconcile.Request {
		return reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "team", Name: name}}
	}
	secret := func(namespace, name string) client.Object {
		return &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
	}
	crd := func(name string, managed bool) client.Object {
		obj := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if managed {
			obj.Labels = map[string]string{vocab.LabelManaged: "true"}
		}
		return obj
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.ElementsMatch(c, []reconcile.Request{request("a"), request("b")}, r.definitionsOfSecret(ctx, secret("team", "repo-password")))
		assert.ElementsMatch(c, []reconcile.Request{request("a")}, r.definitionsOfCRD(ctx, crd("apps.composition.krateo.io", true)))
	}, 30*time.Second, 50*time.Millisecond)
	assert.Equal(t, []reconcile.Request{request("c")}, r.definitionsOfSecret(ctx, secret("team", "other")))
	assert.Empty(t, r.definitionsOfSecret(ctx, secret("elsewhere", "repo-password")), "same name, another namespace")
	assert.Empty(t, r.definitionsOfSecret(ctx, secret("team", "sh.helm.release.v1.app.v1")), "a Helm release")
	assert.Empty(t, r.definitionsOfCRD(ctx, crd("apps.composition.krateo.io", false)), "not managed")
	assert.Empty(t, r.definitionsOfCRD(ctx, crd("others.composition.krateo.io", true)))
}
