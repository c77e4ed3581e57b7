package definition

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	corev1alpha1 "github.com/compositor-dev/compositor/api/core/v1alpha1"
	"github.com/compositor-dev/compositor/chartstore"
	"github.com/compositor-dev/compositor/reconciler/composition"
	"github.com/compositor-dev/compositor/test/controlplane"
)

// testMasterSeal is a master seal with a fresh key and no migration to wait for.
func testMasterSeal(t testing.TB) *composition.MasterSeal {
	t.Helper()
	m, err := composition.NewMasterSeal(composition.NewSealKey())
	require.NoError(t, err)
	return m
}

// Issue 46: serve writes each definition's derived key into its own Secret in
// Compositor's namespace, only once the seal migration is done; a controller's Role
// names the keys of the definitions of its namespace that serve its version, and no
// other; the key goes with its definition.
func TestSealKeySecretsPerDefinition(t *testing.T) {
	cp := controlplane.Start(t)
	ctx := context.Background()
	for _, ns := range []string{"compositor-system", "team-a", "team-b"} {
		require.NoError(t, cp.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	}
	done := false
	master := testMasterSeal(t)
	r := &Reconciler{Client: cp.Client, Live: cp.Client, Seal: master.GateOn(func() bool { return done }),
		Charts: &chartstore.Source{Store: &chartstore.Store{Client: cp.Client, Namespace: "compositor-system"}}}
	api := &generatedAPI{Kind: "FireworksApp", Plural: "fireworksapps", Version: "v1-1-5"}
	define := func(namespace, name string) *corev1alpha1.CompositionDefinition {
		def := &corev1alpha1.CompositionDefinition{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
		def.Spec.Chart.URL, def.Spec.Chart.Version = "oci://example.test/fireworks-app", "1.1.5"
		require.NoError(t, cp.Client.Create(ctx, def))
		def.Status.Kind, def.Status.APIVersion = api.Kind, "composition.krateo.io/"+api.Version
		require.NoError(t, cp.Client.Status().Update(ctx, def))
		return def
	}
	a, a2, b := define("team-a", "fireworks"), define("team-a", "fireworks-too"), define("team-b", "fireworks")

	_, err := r.sealKeySecrets(ctx, a, api)
	require.ErrorIs(t, err, composition.ErrSealUnavailable, "no key before the migration is done")
	err = cp.Client.Get(ctx, client.ObjectKey{Namespace: "compositor-system", Name: composition.KeySecretName(a.UID)}, &corev1.Secret{})
	assert.True(t, apierrors.IsNotFound(err), "nor its Secret: %v", err)

	done = true
	names, err := r.sealKeySecrets(ctx, a, api)
	require.NoError(t, err)
	assert.ElementsMatch(t, []string{composition.KeySecretName(a.UID), composition.KeySecretName(a2.UID)}, names,
		"the keys of team-a's definitions of the version, not team-b's")
	assert.NotContains(t, names, composition.KeySecretName(b.UID))
	secret := &corev1.Secret{}
	require.NoError(t, cp.Client.Get(ctx, client.ObjectKey{Namespace: "compositor-system", Name: composition.KeySecretName(a.UID)}, secret))
	keys := &composition.SecretKeys{Reader: cp.Client, Namespace: "compositor-system"}
	got, err := keys.SealFor(ctx, a)
	require.NoError(t, err)
	want, err := master.ForNamespace(a.Namespace)
	require.NoError(t, err)
	assert.Equal(t, want, got, "the Secret keeps the key derived for a")
	again, err := r.sealKeySecrets(ctx, a, api)
	require.NoError(t, err)
	assert.Equal(t, names, again, "written once, the same after")

	require.NoError(t, r.deleteSealKey(ctx, a))
	err = cp.Client.Get(ctx, client.ObjectKeyFromObject(secret), &corev1.Secret{})
	assert.True(t, apierrors.IsNotFound(err), "the key goes with its definition: %v", err)
	require.NoError(t, r.deleteSealKey(ctx, a), "gone already is no error")
}
