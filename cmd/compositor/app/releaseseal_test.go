package app

import (
	"bytes"
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

	"github.com/compositor-dev/compositor/generators/rbac"
	compositionctrl "github.com/compositor-dev/compositor/reconciler/composition"
	"github.com/compositor-dev/compositor/test/controlplane"
)

// The generated controller reads the release seal as its pod would: acting as the
// version's ServiceAccount, through a live client, on a real API server whose RBAC
// authorizer holds the Role generators/rbac makes. It gets the key with that Role, and
// without it fails with an error that names the Secret, the ServiceAccount and the
// Role it lacks.
func TestControllerReadsTheReleaseSealThroughItsRole(t *testing.T) {
	cp := controlplane.Start(t)
	ctx := context.Background()
	const (
		compositorNS = "compositor-system"
		definitionNS = "fireworksapp-system"
	)
	for _, ns := range []string{compositorNS, definitionNS} {
		require.NoError(t, cp.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	}
	asController := func(t *testing.T) client.Client {
		t.Helper()
		config := rest.CopyConfig(cp.Config)
		config.Impersonate = rest.ImpersonationConfig{
			UserName: "system:serviceaccount:" + definitionNS + ":fireworksapps-v1-1-5-controller",
			Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + definitionNS, "system:authenticated"},
		}
		c, err := client.New(config, client.Options{})
		require.NoError(t, err)
		return c
	}
	read := func(t *testing.T) (*compositionctrl.ReleaseSeal, error) {
		return readReleaseSeal(ctx, asController(t), compositorNS, definitionNS, "fireworksapps", "v1-1-5")
	}

	t.Run("without the Secret", func(t *testing.T) {
		_, err := readReleaseSeal(ctx, cp.Client, compositorNS, definitionNS, "fireworksapps", "v1-1-5")
		require.Error(t, err)
		assert.Contains(t, err.Error(), "Secret compositor-system/compositor-release-seal: it does not exist; compositor serve makes it")
	})

	key := compositionctrl.NewSealKey()
	require.NoError(t, cp.Client.Create(ctx, compositionctrl.SealSecret(compositorNS, rbac.ReleaseSealSecret, key)))

	t.Run("without the Role", func(t *testing.T) {
		_, err := read(t)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "reading the release seal, Secret compositor-system/compositor-release-seal: "+
			"ServiceAccount fireworksapp-system/fireworksapps-v1-1-5-controller may not get it; "+
			"Compositor grants that right with Role and RoleBinding compositor:fireworksapp-system:fireworksapps-v1-1-5:release-seal in compositor-system")
		assert.Contains(t, err.Error(), "forbidden")
	})

	objs, err := rbac.Generate(rbac.Options{
		Namespace: definitionNS, Plural: "fireworksapps", Version: "v1-1-5", ReleaseSealNamespace: compositorNS,
	})
	require.NoError(t, err)
	for _, obj := range []client.Object{objs.ReleaseSealRole, objs.ReleaseSealBinding} {
		require.NoError(t, cp.Client.Create(ctx, obj))
	}

	t.Run("with the Role", func(t *testing.T) {
		var seal *compositionctrl.ReleaseSeal
		require.Eventually(t, func() bool {
			seal, err = read(t)
			return err == nil
		}, 10*time.Second, 50*time.Millisecond, "the RBAC authorizer sees the Role: %v", err)
		want, err := compositionctrl.NewReleaseSeal(key)
		require.NoError(t, err)
		assert.Equal(t, want, seal, "the key compositor serve keeps")

		// That one Secret: no other of Compositor's namespace, no list, no write.
		require.NoError(t, cp.Client.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: compositorNS, Name: "compositor-webhook-ca"},
			StringData: map[string]string{"tls.key": "secret"},
		}))
		as := asController(t)
		err = as.Get(ctx, client.ObjectKey{Namespace: compositorNS, Name: "compositor-webhook-ca"}, &corev1.Secret{})
		assert.True(t, apierrors.IsForbidden(err), "get another Secret: %v", err)
		err = as.List(ctx, &corev1.SecretList{}, client.InNamespace(compositorNS))
		assert.True(t, apierrors.IsForbidden(err), "list Secrets: %v", err)
		sealSecret := compositionctrl.SealSecret(compositorNS, rbac.ReleaseSealSecret, compositionctrl.NewSealKey())
		err = as.Update(ctx, sealSecret)
		assert.True(t, apierrors.IsForbidden(err), "update the seal: %v", err)
		err = as.Delete(ctx, sealSecret)
		assert.True(t, apierrors.IsForbidden(err), "delete the seal: %v", err)
	})

	t.Run("a Secret without a key", func(t *testing.T) {
		secret := &corev1.Secret{}
		require.NoError(t, cp.Client.Get(ctx, client.ObjectKey{Namespace: compositorNS, Name: rbac.ReleaseSealSecret}, secret))
		secret.Data = map[string][]byte{"key": bytes.Repeat([]byte{1}, 8)}
		require.NoError(t, cp.Client.Update(ctx, secret))
		_, err := read(t)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "Secret compositor-system/compositor-release-seal")
		assert.Contains(t, err.Error(), "fewer than the 32 it needs")

		secret.Data = map[string][]byte{"other": key}
		require.NoError(t, cp.Client.Update(ctx, secret))
		_, err = read(t)
		require.Error(t, err)
		assert.Contains(t, err.Error(), `Secret compositor-system/compositor-release-seal has no "key"`)
	})
}
