package chartstore

import (
	"context"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"helm.sh/helm/v4/pkg/chart/common"
	chartutil "helm.sh/helm/v4/pkg/chart/v2/util"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	corev1alpha1 "github.com/compositor-dev/compositor/api/core/v1alpha1"
	"github.com/compositor-dev/compositor/api/vocab"
	"github.com/compositor-dev/compositor/chartfetch"
	"github.com/compositor-dev/compositor/chartverify"
	"github.com/compositor-dev/compositor/internal/condition"
	"github.com/compositor-dev/compositor/test/controlplane"
	"github.com/compositor-dev/compositor/test/samplecharts"
	"github.com/compositor-dev/compositor/test/signing"
)

// TestAttackImportedCharts tries the imported:// path as a tenant (who names any
// imported chart and brings its own keyring Secret) and as whoever can race an import:
//
//   - a Secret named as an imported chart, with its annotations, but not of the
//     imported-chart type, is not served;
//   - a chart whose Chart.yaml names another chart than the Secret says is not served;
//   - the imported chart replaced (compositor import --replace, a signed other
//     content) between the fetch and the signature check: the check refuses, it does
//     not check the new signature against the old archive or the reverse;
//   - a keyring Secret of another namespace is refused before it is read.
//
// Passes today: the code holds.
func TestAttackImportedCharts(t *testing.T) {
	cp := controlplane.Start(t)
	ctx := context.Background()
	for _, ns := range []string{"compositor-system", "team", "other-team"} {
		require.NoError(t, cp.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	}
	fetcher, err := chartfetch.New(chartfetch.Options{})
	require.NoError(t, err)
	store := &Store{Client: cp.Client, Namespace: "compositor-system"}
	source := &Source{Fetcher: fetcher, Live: cp.Client, Store: store}

	key, err := signing.NewPGPKey("Chart Team", "charts@example.com", signing.PGPKeyOptions{})
	require.NoError(t, err)
	pack := func(marker string) []byte {
		ch, err := samplecharts.Load("1.1.5")
		require.NoError(t, err)
		if marker != "" {
			ch.Files = append(ch.Files, &common.File{Name: "marker.txt", Data: []byte(marker)})
		}
		path, err := chartutil.Save(ch, t.TempDir())
		require.NoError(t, err)
		b, err := os.ReadFile(path)
		require.NoError(t, err)
		return b
	}
	signed := func(archive []byte) Imported {
		prov, err := key.SignProvenance(archive)
		require.NoError(t, err)
		return Imported{Name: samplecharts.ChartName, Version: "1.1.5", Digest: digestOf(archive), Archive: archive, Provenance: prov}
	}
	for _, ns := range []string{"team", "other-team"} {
		require.NoError(t, cp.Client.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "chart-keys"},
			Data:       map[string][]byte{"pubring.gpg": key.ArmoredPublicKeyring()},
		}))
	}
	definition := func(keyringNamespace string) *corev1alpha1.CompositionDefinition {
		return &corev1alpha1.CompositionDefinition{
			ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "fireworksapp"},
			Spec: corev1alpha1.CompositionDefinitionSpec{Chart: corev1alpha1.ChartInfo{
				URL: "imported://" + samplecharts.ChartName, Version: "1.1.5",
				Verify: &corev1alpha1.ChartVerification{Provenance: &corev1alpha1.ProvenanceVerification{
					KeyringRef: corev1alpha1.SecretKeySelector{Namespace: keyringNamespace, Name: "chart-keys", Key: "pubring.gpg"},
				}},
			}},
		}
	}
	reason := func(err error) string {
		var ce *condition.Error
		if assert.ErrorAs(t, err, &ce) {
			return ce.Reason
		}
		return ""
	}

	t.Run("a Secret of another type under the imported chart's name", func(t *testing.T) {
		archive := pack("")
		require.NoError(t, cp.Client.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{
				Namespace: "compositor-system", Name: ImportedSecretName(samplecharts.ChartName, "1.1.5"),
				Annotations: map[string]string{
					vocab.AnnotationChartDigest: digestOf(archive), vocab.AnnotationChartName: samplecharts.ChartName, vocab.AnnotationChartVersion: "1.1.5",
				},
			},
			Type: corev1.SecretTypeOpaque,
			Data: map[string][]byte{importedArchiveKey: archive},
		}))
		_, err := source.Fetch(ctx, definition("team"))
		assert.ErrorIs(t, err, ErrStoredMismatch)
		require.NoError(t, cp.Client.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "compositor-system", Name: ImportedSecretName(samplecharts.ChartName, "1.1.5")}}))
	})

	t.Run("an archive of another chart imported under this name", func(t *testing.T) {
		other := pack("")
		im := signed(other)
		im.Name = "not-" + samplecharts.ChartName
		require.NoError(t, store.Import(ctx, im, false))
		def := definition("team")
		def.Spec.Chart.URL = "imported://not-" + samplecharts.ChartName
		_, err := source.Fetch(ctx, def)
		assert.ErrorIs(t, err, chartfetch.ErrChartMismatch)
	})

	t.Run("replaced between the fetch and the check", func(t *testing.T) {
		require.NoError(t, store.Import(ctx, signed(pack("")), false))
		fetched, err := source.Fetch(ctx, definition("team"))
		require.NoError(t, err)
		require.NoError(t, store.Import(ctx, signed(pack("replacement")), true))
		id, err := source.Verify(ctx, definition("team"), fetched)
		assert.Nil(t, id)
		assert.Equal(t, string(chartverify.ReasonTampered), reason(err))

		// And the check of the new content is of the new content.
		fetched, err = source.Fetch(ctx, definition("team"))
		require.NoError(t, err)
		id, err = source.Verify(ctx, definition("team"), fetched)
		require.NoError(t, err)
		assert.Equal(t, fetched.Digest, id.Digest)
	})

	t.Run("a keyring of another namespace", func(t *testing.T) {
		fetched, err := source.Fetch(ctx, definition("team"))
		require.NoError(t, err)
		_, err = source.Verify(ctx, definition("other-team"), fetched)
		assert.Equal(t, ReasonVerificationKeyNotAllowed, reason(err))
		_, err = source.Verify(ctx, definition(""), fetched)
		assert.Equal(t, ReasonVerificationKeyNotAllowed, reason(err))
	})
}
