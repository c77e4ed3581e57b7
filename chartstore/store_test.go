package chartstore

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/compositor-dev/compositor/test/controlplane"
)

// TestStoreKeepsVerifiesAndPrunes: an archive kept is read back only under its own
// digest; one whose Secret was tampered with is refused; pruning deletes exactly the
// archives no one records and leaves other Secrets of the namespace alone.
func TestStoreKeepsVerifiesAndPrunes(t *testing.T) {
	cp := controlplane.Start(t)
	ctx := context.Background()
	require.NoError(t, cp.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "compositor-system"}}))
	store := &Store{Client: cp.Client, Namespace: "compositor-system"}

	kept, dropped := []byte("kept archive"), []byte("dropped archive")
	require.NoError(t, store.Put(ctx, digestOf(kept), kept))
	require.NoError(t, store.Put(ctx, digestOf(dropped), dropped))
	require.NoError(t, store.Put(ctx, digestOf(kept), kept), "keeping it twice is no error")
	assert.ErrorIs(t, store.Put(ctx, digestOf(kept), dropped), ErrStoredMismatch, "content that is not the digest's")
	got, err := store.Get(ctx, digestOf(kept))
	require.NoError(t, err)
	assert.Equal(t, kept, got)
	_, err = store.Get(ctx, digestOf([]byte("never kept")))
	assert.ErrorIs(t, err, ErrNotStored)

	// Someone rewrites a kept archive: it is never used.
	tampered := &corev1.Secret{}
	require.NoError(t, cp.Client.Get(ctx, client.ObjectKey{Namespace: "compositor-system", Name: SecretName(digestOf(dropped))}, tampered))
	tampered.Data[archiveKey] = []byte("something else")
	require.NoError(t, cp.Client.Update(ctx, tampered))
	_, err = store.Get(ctx, digestOf(dropped))
	assert.ErrorIs(t, err, ErrStoredMismatch)

	other := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "compositor-system", Name: "webhook-tls"}}
	require.NoError(t, cp.Client.Create(ctx, other))
	require.NoError(t, store.Prune(ctx, func(digest string) bool { return digest == digestOf(kept) }))
	_, err = store.Get(ctx, digestOf(kept))
	assert.NoError(t, err, "recorded: kept")
	_, err = store.Get(ctx, digestOf(dropped))
	assert.ErrorIs(t, err, ErrNotStored, "recorded by no one: pruned")
	assert.NoError(t, cp.Client.Get(ctx, client.ObjectKeyFromObject(other), &corev1.Secret{}), "not an archive: left alone")
}

// TestKeptArchivesAreOwnedByCompositorsServiceAccount: with Owner, an archive is owned by
// that ServiceAccount, so that it goes with the installation; an Owner that cannot be
// read leaves the archive without one, kept all the same.
func TestKeptArchivesAreOwnedByCompositorsServiceAccount(t *testing.T) {
	cp := controlplane.Start(t)
	ctx := context.Background()
	require.NoError(t, cp.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "compositor-system"}}))
	account := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "compositor-system", Name: "compositor"}}
	require.NoError(t, cp.Client.Create(ctx, account))

	owned := []byte("owned archive")
	require.NoError(t, (&Store{Client: cp.Client, Namespace: "compositor-system", Owner: "compositor"}).Put(ctx, digestOf(owned), owned))
	secret := &corev1.Secret{}
	require.NoError(t, cp.Client.Get(ctx, client.ObjectKey{Namespace: "compositor-system", Name: SecretName(digestOf(owned))}, secret))
	assert.Equal(t, []metav1.OwnerReference{{APIVersion: "v1", Kind: "ServiceAccount", Name: "compositor", UID: account.UID}}, secret.OwnerReferences)

	orphan := []byte("orphan archive")
	require.NoError(t, (&Store{Client: cp.Client, Namespace: "compositor-system", Owner: "gone"}).Put(ctx, digestOf(orphan), orphan))
	require.NoError(t, cp.Client.Get(ctx, client.ObjectKey{Namespace: "compositor-system", Name: SecretName(digestOf(orphan))}, secret))
	assert.Empty(t, secret.OwnerReferences)
}
