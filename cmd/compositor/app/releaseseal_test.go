package app

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	corev1alpha1 "github.com/compositor-dev/compositor/api/core/v1alpha1"
	"github.com/compositor-dev/compositor/generators/rbac"
	compositionctl "github.com/compositor-dev/compositor/reconciler/composition"
	"github.com/compositor-dev/compositor/test/controlplane"
)

// Issue 46, deployments mode: a generated controller reads the keys of its
// definitions as its pod would, acting as the version's ServiceAccount through a live
// client on a real API server whose RBAC authorizer holds the Role generators/rbac
// makes. It gets its own definition's key, and is forbidden the master key and
// another definition's key; without the Role, the error says what it lacks.
func TestControllerReadsOnlyItsDefinitionsKeys(t *testing.T) {
	cp := controlplane.Start(t)
	ctx := context.Background()
	const (
		compositorNS = "compositor-system"
		definitionNS = "fireworksapp-system"
	)
	for _, ns := range []string{compositorNS, definitionNS} {
		require.NoError(t, cp.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	}
	sa := rbac.ServiceAccountName(definitionNS, "fireworksapps", "v1-1-5")
	asController := func(t *testing.T) client.Client {
		t.Helper()
		config := rest.CopyConfig(cp.Config)
		config.Impersonate = rest.ImpersonationConfig{
			UserName: "system:serviceaccount:" + compositorNS + ":" + sa,
			Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + compositorNS, "system:authenticated"},
		}
		c, err := client.New(config, client.Options{})
		require.NoError(t, err)
		return c
	}
	master, err := compositionctl.NewMasterSeal(compositionctl.NewSealKey())
	require.NoError(t, err)
	mine := &corev1alpha1.CompositionDefinition{ObjectMeta: metav1.ObjectMeta{Namespace: definitionNS, Name: "fireworks", UID: "uid-mine"}}
	theirs := &corev1alpha1.CompositionDefinition{ObjectMeta: metav1.ObjectMeta{Namespace: "team-b", Name: "fireworks", UID: "uid-theirs"}}
	require.NoError(t, cp.Client.Create(ctx, compositionctl.SealSecret(compositorNS, rbac.ReleaseSealSecret, compositionctl.NewSealKey())))
	for _, def := range []*corev1alpha1.CompositionDefinition{mine, theirs} {
		secret, err := master.KeySecret(compositorNS, def)
		require.NoError(t, err)
		require.NoError(t, cp.Client.Create(ctx, secret))
	}

	t.Run("without the Role", func(t *testing.T) {
		_, err := (&compositionctl.SecretKeys{Reader: asController(t), Namespace: compositorNS}).SealFor(ctx, mine)
		require.ErrorIs(t, err, compositionctl.ErrSealUnavailable)
		assert.Contains(t, err.Error(), "may not get Secret "+compositorNS+"/"+compositionctl.KeySecretName("uid-mine"))
	})

	objs, err := rbac.Generate(rbac.Options{
		Namespace: definitionNS, IdentityNamespace: compositorNS, Plural: "fireworksapps", Version: "v1-1-5",
		ReleaseSealNamespace: compositorNS, SealKeySecrets: []string{compositionctl.KeySecretName(mine.UID)},
	})
	require.NoError(t, err)
	for _, obj := range []client.Object{objs.ReleaseSealRole, objs.ReleaseSealBinding} {
		require.NoError(t, cp.Client.Create(ctx, obj))
	}

	t.Run("with the Role", func(t *testing.T) {
		keys := &compositionctl.SecretKeys{Reader: asController(t), Namespace: compositorNS}
		var seal *compositionctl.ReleaseSeal
		require.Eventually(t, func() bool {
			seal, err = keys.SealFor(ctx, mine)
			return err == nil
		}, 10*time.Second, 50*time.Millisecond, "the RBAC authorizer sees the Role: %v", err)
		want, err := master.ForNamespace(mine.Namespace)
		require.NoError(t, err)
		assert.Equal(t, want, seal, "its definition's key, as serve derives it")

		_, err = keys.SealFor(ctx, theirs)
		require.ErrorIs(t, err, compositionctl.ErrSealUnavailable, "another definition's key")
		assert.Contains(t, err.Error(), "may not get")

		as := asController(t)
		for _, name := range []string{rbac.ReleaseSealSecret, compositionctl.KeySecretName(theirs.UID)} {
			err = as.Get(ctx, client.ObjectKey{Namespace: compositorNS, Name: name}, &corev1.Secret{})
			assert.True(t, apierrors.IsForbidden(err), "get %s: %v", name, err)
		}
		err = as.List(ctx, &corev1.SecretList{}, client.InNamespace(compositorNS))
		assert.True(t, apierrors.IsForbidden(err), "list Secrets: %v", err)
		own := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: compositorNS, Name: compositionctl.KeySecretName(mine.UID)}}
		assert.True(t, apierrors.IsForbidden(as.Delete(ctx, own)), "delete its own key")
	})

	t.Run("a Secret of that name that is not the definition's key", func(t *testing.T) {
		impostor := &corev1alpha1.CompositionDefinition{ObjectMeta: metav1.ObjectMeta{Namespace: definitionNS, Name: "other", UID: "uid-impostor"}}
		secret := compositionctl.SealSecret(compositorNS, compositionctl.KeySecretName(impostor.UID), compositionctl.NewSealKey())
		require.NoError(t, cp.Client.Create(ctx, secret))
		_, err := (&compositionctl.SecretKeys{Reader: cp.Client, Namespace: compositorNS}).SealFor(ctx, impostor)
		assert.ErrorIs(t, err, compositionctl.ErrSealUnavailable)
	})
}
