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

func TestParseImportedURL(t *testing.T) {
	for raw, want := range map[string]string{
		"imported://fireworks-app": "fireworks-app",
		"IMPORTED://app":           "app",
		"imported://app/":          "app",
	} {
		name, ok, err := ParseImportedURL(raw)
		require.NoError(t, err, raw)
		assert.True(t, ok, raw)
		assert.Equal(t, want, name, raw)
	}
	for _, raw := range []string{"oci://r/app", "https://charts.example.com", "app", ""} {
		_, ok, err := ParseImportedURL(raw)
		assert.False(t, ok, raw)
		assert.NoError(t, err, raw)
	}
	for _, raw := range []string{"imported://", "imported://a/b", "imported://u:p@app", "imported://app:1", "imported://app?x=1", "imported://app#f"} {
		_, ok, err := ParseImportedURL(raw)
		assert.True(t, ok, raw)
		assert.ErrorContains(t, err, "imported://NAME", raw)
	}
}

// TestImportedCharts: an imported chart is read back under its name and version with
// the signature it came with; other content under the same name and version replaces it
// only when asked; a Secret rewritten behind Compositor's back, or one that names
// another chart, is never used; imported charts are not pruned with kept archives.
func TestImportedCharts(t *testing.T) {
	cp := controlplane.Start(t)
	ctx := context.Background()
	require.NoError(t, cp.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "compositor-system"}}))
	store := &Store{Client: cp.Client, Namespace: "compositor-system"}

	archive := []byte("an archive")
	im := Imported{Name: "app", Version: "1.0.0+build.1", Digest: digestOf(archive), Archive: archive, Provenance: []byte("a prov")}
	require.NoError(t, store.Import(ctx, im, false))
	require.NoError(t, store.Import(ctx, im, false), "the same content twice is no error")
	got, err := store.Imported(ctx, "app", "1.0.0+build.1")
	require.NoError(t, err)
	assert.Equal(t, im.Digest, got.Digest)
	assert.Equal(t, archive, got.Archive)
	assert.Equal(t, []byte("a prov"), got.Provenance)
	assert.Empty(t, got.Bundle)

	// The same archive with its other signature: both are kept.
	require.NoError(t, store.Import(ctx, Imported{Name: "app", Version: "1.0.0+build.1", Digest: digestOf(archive), Archive: archive, Bundle: []byte("a bundle")}, false))
	got, err = store.Imported(ctx, "app", "1.0.0+build.1")
	require.NoError(t, err)
	assert.Equal(t, []byte("a prov"), got.Provenance)
	assert.Equal(t, []byte("a bundle"), got.Bundle)

	_, err = store.Imported(ctx, "app", "2.0.0")
	assert.ErrorIs(t, err, ErrNotImported)
	assert.ErrorContains(t, err, "compositor import")

	other := []byte("other content")
	replacement := Imported{Name: "app", Version: "1.0.0+build.1", Digest: digestOf(other), Archive: other, Bundle: []byte("{}")}
	err = store.Import(ctx, replacement, false)
	assert.ErrorIs(t, err, ErrImportedElsewhere)
	assert.ErrorContains(t, err, "--replace")
	require.NoError(t, store.Import(ctx, replacement, true))
	got, err = store.Imported(ctx, "app", "1.0.0+build.1")
	require.NoError(t, err)
	assert.Equal(t, other, got.Archive)
	assert.Empty(t, got.Provenance, "the old signature goes with the old content")
	assert.Equal(t, []byte("{}"), got.Bundle)

	assert.ErrorIs(t, store.Import(ctx, Imported{Name: "x", Version: "1", Digest: digestOf(archive), Archive: other}, false), ErrStoredMismatch)
	assert.ErrorIs(t, store.Import(ctx, Imported{Name: "x", Version: "1", Digest: digestOf(make([]byte, MaxStoredArchiveBytes+1)), Archive: make([]byte, MaxStoredArchiveBytes+1)}, false), ErrTooLargeToStore)

	// Rewritten behind Compositor's back.
	secret := &corev1.Secret{}
	key := client.ObjectKey{Namespace: "compositor-system", Name: ImportedSecretName("app", "1.0.0+build.1")}
	require.NoError(t, cp.Client.Get(ctx, key, secret))
	secret.Data[importedArchiveKey] = []byte("swapped")
	require.NoError(t, cp.Client.Update(ctx, secret))
	_, err = store.Imported(ctx, "app", "1.0.0+build.1")
	assert.ErrorIs(t, err, ErrStoredMismatch)

	// A Secret of that name that says it holds another chart.
	require.NoError(t, cp.Client.Get(ctx, key, secret))
	secret.Data[importedArchiveKey] = other
	secret.Annotations["compositor.dev/chart-name"] = "another"
	require.NoError(t, cp.Client.Update(ctx, secret))
	_, err = store.Imported(ctx, "app", "1.0.0+build.1")
	assert.ErrorIs(t, err, ErrStoredMismatch)

	require.NoError(t, store.Prune(ctx, func(string) bool { return false }))
	assert.NoError(t, cp.Client.Get(ctx, key, secret), "imported charts are not pruned")

	_, err = (&Store{Client: cp.Client, Namespace: "compositor-system", ReadOnly: true}).Imported(ctx, "app", "2.0.0")
	assert.ErrorIs(t, err, ErrNotImported)
	assert.ErrorIs(t, (&Store{Client: cp.Client, Namespace: "compositor-system", ReadOnly: true}).Import(ctx, im, false), ErrReadOnly)
}
