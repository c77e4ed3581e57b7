package definition

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	corev1alpha1 "github.com/compositor-dev/compositor/api/core/v1alpha1"
	"github.com/compositor-dev/compositor/chartfetch"
	"github.com/compositor-dev/compositor/chartstore"
	"github.com/compositor-dev/compositor/generators/crd"
	"github.com/compositor-dev/compositor/test/chartserver"
	"github.com/compositor-dev/compositor/test/controlplane"
	"github.com/compositor-dev/compositor/test/samplecharts"
	"github.com/compositor-dev/compositor/test/signing"
)

// staticBundle is a CA bundle for the conversion webhook no conversion here calls.
type staticBundle string

func (b staticBundle) CABundle() []byte { return []byte(b) }

// TestAttackVerificationOfTheServedChart drives the definition reconciler, against a
// real API server, through changes of spec.chart.verify (and of the keyring it names)
// on a definition that already serves fireworks-app 1.1.5, whose .prov is signed by
// key A:
//
//  1. served without verify, then verify added with a keyring that does not hold the
//     signer (what a tenant does to quiet require-chart-verification's audit): the
//     chart store must hand the chart to no one (the composition controllers and the
//     webhooks never look at the definition's conditions);
//  2. verified with key A, then the keyring rotated to key B only (A compromised):
//     the same, and status.verification must no longer say that key A verified what
//     is served;
//  3. the chart source then goes down: keptVerified must not go on with the kept
//     archive on the strength of key A's old check.
//
// The assertions marked ATTACK failed before the chart store and keptVerified required
// a record of the check of the very archive served.
func TestAttackVerificationOfTheServedChart(t *testing.T) {
	cp := controlplane.Start(t)
	ctx := context.Background()
	for _, ns := range []string{"team", "compositor-system"} {
		require.NoError(t, cp.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	}
	httpClient, err := rest.HTTPClientFor(cp.Config)
	require.NoError(t, err)
	mapper, err := apiutil.NewDynamicRESTMapper(cp.Config, httpClient)
	require.NoError(t, err)

	keyA, err := signing.NewPGPKey("Chart Team", "charts@example.com", signing.PGPKeyOptions{})
	require.NoError(t, err)
	keyB, err := signing.NewPGPKey("New Chart Team", "charts-new@example.com", signing.PGPKeyOptions{})
	require.NoError(t, err)
	dir := t.TempDir()
	require.NoError(t, samplecharts.Package(dir))
	archive, err := os.ReadFile(filepath.Join(dir, "fireworks-app-1.1.5.tgz"))
	require.NoError(t, err)
	prov, err := keyA.SignProvenance(archive)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "fireworks-app-1.1.5.tgz.prov"), prov, 0o644))
	repository := chartserver.NewRepository(t, chartserver.RepositoryOptions{Dir: dir})

	fetcher, err := chartfetch.New(chartfetch.Options{AllowNetworks: chartfetch.LoopbackNetworks()})
	require.NoError(t, err)
	charts := &chartstore.Source{Fetcher: fetcher, Live: cp.Client, Store: &chartstore.Store{Client: cp.Client, Namespace: "compositor-system"}}
	r := &Reconciler{
		Client: cp.Client, Live: cp.Client, Charts: charts, Mapper: mapper, Seal: testMasterSeal(t),
		ControllerImage: "controller.example.invalid/compositor:test",
		Conversion:      crd.ConversionWebhook{URL: "https://127.0.0.1:1/convert"},
		Bundle:          staticBundle(cp.Config.CAData),
	}

	keyring := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "chart-keys"},
		Data:       map[string][]byte{"pubring.gpg": keyB.ArmoredPublicKeyring()},
	}
	require.NoError(t, cp.Client.Create(ctx, keyring))
	setKeyring := func(k *signing.PGPKey) {
		t.Helper()
		keyring.Data = map[string][]byte{"pubring.gpg": k.ArmoredPublicKeyring()}
		require.NoError(t, cp.Client.Update(ctx, keyring))
	}

	key := types.NamespacedName{Namespace: "team", Name: "fireworksapp"}
	def := &corev1alpha1.CompositionDefinition{
		ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name},
		Spec: corev1alpha1.CompositionDefinitionSpec{Chart: corev1alpha1.ChartInfo{
			URL: repository.URL, Repo: samplecharts.ChartName, Version: "1.1.5",
		}},
	}
	require.NoError(t, cp.Client.Create(ctx, def))
	reconcileOnce := func() (*corev1alpha1.CompositionDefinition, *metav1.Condition, error) {
		t.Helper()
		_, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: key})
		got := &corev1alpha1.CompositionDefinition{}
		require.NoError(t, cp.Client.Get(ctx, key, got))
		return got, meta.FindStatusCondition(got.Status.Conditions, corev1alpha1.ConditionSynced), err
	}
	setVerify := func(v *corev1alpha1.ChartVerification) {
		t.Helper()
		got := &corev1alpha1.CompositionDefinition{}
		require.NoError(t, cp.Client.Get(ctx, key, got))
		got.Spec.Chart.Verify = v
		require.NoError(t, cp.Client.Update(ctx, got))
	}
	provenance := &corev1alpha1.ChartVerification{Provenance: &corev1alpha1.ProvenanceVerification{
		KeyringRef: corev1alpha1.SecretKeySelector{Namespace: "team", Name: "chart-keys", Key: "pubring.gpg"},
	}}

	// Served, unverified: no verify yet.
	served, synced, err := reconcileOnce()
	require.NoError(t, err)
	require.NotNil(t, synced)
	require.Equal(t, metav1.ConditionTrue, synced.Status, synced.Message)
	digest := served.Status.Digest
	require.NotEmpty(t, digest)
	crdName := served.Status.Resource + ".composition.krateo.io"

	t.Run("verify added to a served chart that does not pass it", func(t *testing.T) {
		setVerify(provenance) // keyring: B, which did not sign 1.1.5
		got, synced, err := reconcileOnce()
		require.Error(t, err)
		require.NotNil(t, synced)
		assert.Equal(t, "ChartSignedByUnknownKey", synced.Reason)
		assert.Equal(t, digest, got.Status.Digest, "still the digest the check just refused")
		assert.Nil(t, got.Status.Verification)

		generated := &apiextensionsv1.CustomResourceDefinition{}
		require.NoError(t, cp.Client.Get(ctx, client.ObjectKey{Name: crdName}, generated), "the API is still served")

		// What the composition controllers, the audit and the admission webhooks call.
		_, chartDigest, err := charts.Chart(ctx, got)
		assert.Error(t, err, "ATTACK: the chart store hands out %s, which spec.chart.verify refuses, to whatever installs compositions", chartDigest)
	})

	t.Run("keyring rotated away from the key that signed the served chart", func(t *testing.T) {
		setKeyring(keyA)
		got, synced, err := reconcileOnce()
		require.NoError(t, err)
		require.Equal(t, metav1.ConditionTrue, synced.Status, synced.Message)
		require.NotNil(t, got.Status.Verification)
		require.Equal(t, keyA.Fingerprint(), got.Status.Verification.KeyFingerprint)

		setKeyring(keyB) // key A is compromised: only B is trusted now
		got, synced, err = reconcileOnce()
		require.Error(t, err)
		assert.Equal(t, "ChartSignedByUnknownKey", synced.Reason)
		assert.Equal(t, digest, got.Status.Digest)
		if v := got.Status.Verification; v != nil {
			assert.NotEqual(t, keyA.Fingerprint(), v.KeyFingerprint,
				"ATTACK: status.verification says key A verified %s, while the check the spec asks for just refused it", v.Digest)
		}
		_, _, err = charts.Chart(ctx, got)
		assert.Error(t, err, "ATTACK: the chart key B refuses is still handed to the composition controllers")
	})

	t.Run("then the chart source goes down", func(t *testing.T) {
		repository.Close()
		_, synced, _ := reconcileOnce()
		require.NotNil(t, synced)
		assert.Equal(t, "ChartSignatureUnavailable", synced.Reason,
			"ATTACK: keptVerified accepted the kept archive on the strength of key A's old check: %s", synced.Message)
	})
}

// capturingIndexer records the extractors registered with it.
type capturingIndexer map[string]client.IndexerFunc

func (c capturingIndexer) IndexField(_ context.Context, _ client.Object, field string, extract client.IndexerFunc) error {
	c[field] = extract
	return nil
}

// TestAttackVerificationSecretsAreNotWatched: a change to the Secret of
// spec.chart.verify (a compromised key taken out of the keyring, a trusted root
// replaced) should make its definitions check their chart again, as a change to the
// credentials Secret does: the Secret watch maps a Secret to definitions through
// credentialsIndex, which must hold every Secret the definition names (it held
// spec.chart.credentials.passwordRef only, so new key material waited for the next poll).
func TestAttackVerificationSecretsAreNotWatched(t *testing.T) {
	indexer := capturingIndexer{}
	require.NoError(t, indexDefinitions(context.Background(), indexer))
	extract := indexer[credentialsIndex]
	require.NotNil(t, extract)

	keyring := corev1alpha1.SecretKeySelector{Namespace: "team", Name: "chart-keys", Key: "pubring.gpg"}
	def := &corev1alpha1.CompositionDefinition{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "fireworksapp"},
		Spec: corev1alpha1.CompositionDefinitionSpec{Chart: corev1alpha1.ChartInfo{
			URL: "https://charts.example.com", Repo: "fireworks-app", Version: "1.1.5",
			Verify: &corev1alpha1.ChartVerification{Provenance: &corev1alpha1.ProvenanceVerification{KeyringRef: keyring}},
		}},
	}
	assert.Contains(t, extract(def), "team/chart-keys", "a change of the keyring Secret does not reach the definition")
}
