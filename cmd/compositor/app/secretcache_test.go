package app

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/compositor-dev/compositor/test/controlplane"
)

// lastApplied is what `kubectl apply` leaves on a Secret: its data, in clear.
const lastApplied = `{"apiVersion":"v1","kind":"Secret","stringData":{"password":"hunter2"}}`

func TestStripSecretMetadata(t *testing.T) {
	meta := metav1.ObjectMeta{
		Name: "chart-password", Namespace: "team-a",
		Labels:        map[string]string{"team": "a"},
		Annotations:   map[string]string{corev1.LastAppliedConfigAnnotation: lastApplied},
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}},
	}
	for name, obj := range map[string]client.Object{
		"metadata only": &metav1.PartialObjectMetadata{ObjectMeta: *meta.DeepCopy()},
		"typed":         &corev1.Secret{ObjectMeta: *meta.DeepCopy()},
	} {
		t.Run(name, func(t *testing.T) {
			out, err := stripSecretMetadata(obj)
			require.NoError(t, err)
			got := out.(client.Object)
			assert.Empty(t, got.GetAnnotations())
			assert.Empty(t, got.GetManagedFields())
			assert.Equal(t, "chart-password", got.GetName())
			assert.Equal(t, map[string]string{"team": "a"}, got.GetLabels(), "labels stay: the watch may select on them")
		})
	}
	t.Run("a tombstone passes unchanged", func(t *testing.T) {
		tombstone := toolscache.DeletedFinalStateUnknown{Key: "team-a/chart-password"}
		out, err := stripSecretMetadata(tombstone)
		require.NoError(t, err)
		assert.Equal(t, tombstone, out)
	})
}

// TestSecretCacheHoldsNoAnnotations reads, through a cache configured as the
// manager's, a Secret written with its data in last-applied-configuration.
func TestSecretCacheHoldsNoAnnotations(t *testing.T) {
	cp := controlplane.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "chart-password", Namespace: "default",
			Annotations: map[string]string{corev1.LastAppliedConfigAnnotation: lastApplied}},
		StringData: map[string]string{"password": "hunter2"},
	}
	require.NoError(t, cp.Client.Create(ctx, secret))

	c, err := cache.New(cp.Config, cache.Options{Scheme: scheme.Scheme, ByObject: secretCache()})
	require.NoError(t, err)
	go func() { _ = c.Start(ctx) }()
	require.True(t, c.WaitForCacheSync(ctx))

	cached := &metav1.PartialObjectMetadata{}
	cached.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(secret), cached))
	assert.Equal(t, secret.UID, cached.UID)
	assert.Empty(t, cached.Annotations)
	assert.Empty(t, cached.ManagedFields)
}
