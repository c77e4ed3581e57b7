package e2e

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	chartcommon "helm.sh/helm/v4/pkg/chart/common"
	chartutil "helm.sh/helm/v4/pkg/chart/v2/util"
	repo "helm.sh/helm/v4/pkg/repo/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	corev1alpha1 "github.com/compositor-dev/compositor/api/core/v1alpha1"
	"github.com/compositor-dev/compositor/cmd/compositor/app"
	"github.com/compositor-dev/compositor/test/chartserver"
	"github.com/compositor-dev/compositor/test/controlplane"
	"github.com/compositor-dev/compositor/test/samplecharts"
	"github.com/compositor-dev/compositor/test/signing"
)

// signedDefinition is a definition of fireworks-app 1.1.5 at url (with repo, when
// set) in namespace, whose chart is verified as verify says.
func signedDefinition(namespace, url, repoName, verify string) string {
	m := "apiVersion: core.krateo.io/v1alpha1\nkind: CompositionDefinition\nmetadata: {name: fireworksapp-1-1-5, namespace: " + namespace + "}\n" +
		"spec:\n  chart:\n    url: " + url + "\n    version: 1.1.5\n"
	if repoName != "" {
		m += "    repo: " + repoName + "\n"
	}
	if verify != "" {
		m += "    verify: " + verify + "\n"
	}
	return m
}

// provenanceVerify names the keyring Secret chart-keys of namespace.
func provenanceVerify(namespace string) string {
	return "{provenance: {keyringRef: {name: chart-keys, namespace: " + namespace + ", key: pubring.gpg}}}"
}

// keySecret creates the Secret chart-keys holding data under key in namespace, and the
// namespace.
func keySecret(t *testing.T, cp *controlplane.ControlPlane, namespace, key string, data []byte) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, client.IgnoreAlreadyExists(cp.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}})))
	require.NoError(t, cp.Client.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "chart-keys", Namespace: namespace},
		Data:       map[string][]byte{key: data},
	}))
}

// definitionIn reads the definition fireworksapp-1-1-5 of namespace.
func definitionIn(t assert.TestingT, cp *controlplane.ControlPlane, namespace string) *corev1alpha1.CompositionDefinition {
	def := &corev1alpha1.CompositionDefinition{}
	assert.NoError(t, cp.Client.Get(context.Background(), client.ObjectKey{Namespace: namespace, Name: "fireworksapp-1-1-5"}, def))
	return def
}

// requireRefused waits until the definition of namespace reports Synced=False with
// reason, and checks that it serves nothing and that an event says so.
func requireRefused(t *testing.T, cp *controlplane.ControlPlane, namespace, reason, inMessage string) {
	t.Helper()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		synced := definitionConditionOf(c, cp, namespace, "fireworksapp-1-1-5", "Synced")
		if assert.NotNil(c, synced) {
			assert.Equal(c, metav1.ConditionFalse, synced.Status)
			assert.Equal(c, reason, synced.Reason)
			assert.Contains(c, synced.Message, inMessage)
		}
	}, time.Minute, 250*time.Millisecond, "definition of %s", namespace)
	def := definitionIn(t, cp, namespace)
	assert.Empty(t, def.Status.APIVersion, "a refused chart serves no API")
	assert.Empty(t, def.Status.Digest)
	assert.Nil(t, def.Status.Verification)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		events := &corev1.EventList{}
		require.NoError(c, cp.Client.List(context.Background(), events, client.InNamespace(namespace)))
		var reasons []string
		for _, e := range events.Items {
			if e.InvolvedObject.Kind == "CompositionDefinition" && e.Type == corev1.EventTypeWarning {
				reasons = append(reasons, e.Reason)
			}
		}
		assert.Contains(c, reasons, reason, "a warning event of %s", namespace)
	}, 30*time.Second, 250*time.Millisecond)
}

// Issue 32: with verification required by the platform, an air-gapped cluster imports
// a signed chart and serves it with no chart source at all; charts of a repository
// serve only when their .prov checks with the definition's keyring, and each refusal
// says why.
func TestSignedChartsAndAirGappedImport(t *testing.T) {
	cp := controlplane.Start(t)
	startCompositor(t, cp, func(o *app.ServeOptions) {
		o.Controllers = app.ControllersInProcess
		o.Poll = time.Second
		o.EnabledPolicies = []string{"require-chart-verification"}
	})
	ctx := context.Background()

	team, err := signing.NewPGPKey("Chart Team", "charts@example.com", signing.PGPKeyOptions{})
	require.NoError(t, err)
	stranger, err := signing.NewPGPKey("Someone Else", "else@example.com", signing.PGPKeyOptions{})
	require.NoError(t, err)
	dir := t.TempDir()
	require.NoError(t, samplecharts.Package(dir))
	archivePath := filepath.Join(dir, "fireworks-app-1.1.5.tgz")
	archive, err := os.ReadFile(archivePath)
	require.NoError(t, err)
	prov, err := team.SignProvenance(archive)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(archivePath+".prov", prov, 0o644))
	keyring := filepath.Join(t.TempDir(), "pubring.asc")
	require.NoError(t, os.WriteFile(keyring, team.ArmoredPublicKeyring(), 0o644))

	t.Run("the platform refuses a definition without verification", func(t *testing.T) {
		keySecret(t, cp, "fireworksapp-system", "pubring.gpg", team.ArmoredPublicKeyring())
		res := cp.Kubectl(ctx, signedDefinition("fireworksapp-system", "imported://fireworks-app", "", ""), "apply", "-f", "-")
		require.Error(t, res.Err)
		assert.Contains(t, res.Stderr, "spec.chart.verify: this platform requires every chart to be verified")
	})

	t.Run("import, with no chart source, then serve and install", func(t *testing.T) {
		// A key that did not sign it: import refuses, and keeps nothing.
		wrongKeyring := filepath.Join(t.TempDir(), "stranger.asc")
		require.NoError(t, os.WriteFile(wrongKeyring, stranger.ArmoredPublicKeyring(), 0o644))
		var out bytes.Buffer
		err := app.RunImport(ctx, &out, &app.ImportOptions{Namespace: "compositor-system", Kubeconfig: cp.Kubeconfig,
			Signature: app.SignatureOptions{Keyring: wrongKeyring}}, archivePath)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "ChartSignedByUnknownKey")
		secrets := &corev1.SecretList{}
		require.NoError(t, cp.Client.List(ctx, secrets, client.InNamespace("compositor-system"), client.MatchingLabels{"compositor.dev/imported-chart": "true"}))
		assert.Empty(t, secrets.Items, "a refused import keeps nothing")

		out.Reset()
		require.NoError(t, app.RunImport(ctx, &out, &app.ImportOptions{Namespace: "compositor-system", Kubeconfig: cp.Kubeconfig,
			Signature: app.SignatureOptions{Keyring: keyring}}, archivePath))
		assert.Contains(t, out.String(), "Provenance signature of sha256:")
		assert.Contains(t, out.String(), "url: imported://fireworks-app")

		res := cp.Kubectl(ctx, signedDefinition("fireworksapp-system", "imported://fireworks-app", "", provenanceVerify("fireworksapp-system")), "apply", "-f", "-")
		require.NoError(t, res.Err, res.Stderr)
		res = cp.Kubectl(ctx, "", "wait", "compositiondefinition", "fireworksapp-1-1-5", "-n", "fireworksapp-system", "--for", "condition=Ready=True", "--timeout", "120s")
		require.NoError(t, res.Err, res.Stderr)
		def := definitionIn(t, cp, "fireworksapp-system")
		require.NotNil(t, def.Status.Verification)
		assert.Equal(t, "Provenance", def.Status.Verification.Method)
		assert.Equal(t, team.Fingerprint(), def.Status.Verification.KeyFingerprint)
		assert.Equal(t, "Chart Team <charts@example.com>", def.Status.Verification.Signer)
		assert.Equal(t, def.Status.Digest, def.Status.Verification.Digest)
		assert.Equal(t, "imported://fireworks-app:1.1.5", def.Status.PackageURL)

		res = cp.Kubectl(ctx, fireworksApp("airgapped", 1), "apply", "-f", "-")
		require.NoError(t, res.Err, res.Stderr)
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			releases := helmReleases(c, cp)
			assert.Equal(c, "fireworks-app-1.1.5", releases["airgapped"].Chart)
			assert.Equal(c, "deployed", releases["airgapped"].Status)
		}, 2*time.Minute, 250*time.Millisecond)
	})

	// The same chart from a Helm repository, its .prov beside it; and the same
	// repository path serving what an attacker or a mistake would.
	good := chartserver.NewRepository(t, chartserver.RepositoryOptions{Dir: dir})
	unsignedDir := t.TempDir()
	require.NoError(t, samplecharts.Package(unsignedDir))
	unsigned := chartserver.NewRepository(t, chartserver.RepositoryOptions{Dir: unsignedDir})
	tamperedDir := t.TempDir()
	tamper(t, tamperedDir, prov)
	tampered := chartserver.NewRepository(t, chartserver.RepositoryOptions{Dir: tamperedDir})
	// Signed a day after its key expired.
	lapsed, err := signing.NewPGPKey("Lapsed Team", "lapsed@example.com", signing.PGPKeyOptions{
		Created: time.Now().Add(-72 * time.Hour), Lifetime: 24 * time.Hour})
	require.NoError(t, err)
	expiredDir := t.TempDir()
	require.NoError(t, samplecharts.Package(expiredDir))
	lateProv, err := lapsed.SignProvenanceWith(archive, signing.SignOptions{Time: time.Now().Add(-24 * time.Hour)})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(expiredDir, "fireworks-app-1.1.5.tgz.prov"), lateProv, 0o644))
	expired := chartserver.NewRepository(t, chartserver.RepositoryOptions{Dir: expiredDir})

	t.Run("a repository chart whose .prov checks", func(t *testing.T) {
		keySecret(t, cp, "signed", "pubring.gpg", team.PublicKeyring()) // binary this time
		res := cp.Kubectl(ctx, signedDefinition("signed", good.URL, "fireworks-app", provenanceVerify("signed")), "apply", "-f", "-")
		require.NoError(t, res.Err, res.Stderr)
		res = cp.Kubectl(ctx, "", "wait", "compositiondefinition", "fireworksapp-1-1-5", "-n", "signed", "--for", "condition=Ready=True", "--timeout", "120s")
		require.NoError(t, res.Err, res.Stderr)
		def := definitionIn(t, cp, "signed")
		require.NotNil(t, def.Status.Verification)
		assert.Equal(t, team.Fingerprint(), def.Status.Verification.KeyFingerprint)
		assert.True(t, strings.HasSuffix(def.Status.PackageURL, "fireworks-app-1.1.5.tgz"), def.Status.PackageURL)
	})

	t.Run("refusals", func(t *testing.T) {
		keySecret(t, cp, "wrong-key", "pubring.gpg", stranger.ArmoredPublicKeyring())
		keySecret(t, cp, "unsigned", "pubring.gpg", team.ArmoredPublicKeyring())
		keySecret(t, cp, "tampered", "pubring.gpg", team.ArmoredPublicKeyring())
		keySecret(t, cp, "expired", "pubring.gpg", lapsed.ArmoredPublicKeyring())
		for _, m := range []string{
			signedDefinition("wrong-key", good.URL, "fireworks-app", provenanceVerify("wrong-key")),
			signedDefinition("unsigned", unsigned.URL, "fireworks-app", provenanceVerify("unsigned")),
			signedDefinition("tampered", tampered.URL, "fireworks-app", provenanceVerify("tampered")),
			signedDefinition("expired", expired.URL, "fireworks-app", provenanceVerify("expired")),
		} {
			res := cp.Kubectl(ctx, m, "apply", "-f", "-")
			require.NoError(t, res.Err, res.Stderr)
		}
		requireRefused(t, cp, "wrong-key", "ChartSignedByUnknownKey", "which the keyring does not hold")
		requireRefused(t, cp, "unsigned", "ChartUnsigned", "no .prov file")
		requireRefused(t, cp, "tampered", "ChartTampered", "is not the")
		requireRefused(t, cp, "expired", "ChartSignatureExpired", "expired on")

		// A keyring in another namespace is refused at apply, before any read.
		res := cp.Kubectl(ctx, signedDefinition("wrong-key", good.URL, "fireworks-app", provenanceVerify("signed")), "apply", "-f", "-")
		require.Error(t, res.Err)
		assert.Contains(t, res.Stderr, "spec.chart.verify.provenance.keyringRef.namespace")
	})
}

// Issue 32: OCI charts signed with cosign, by key and keyless against an offline
// trusted root, with the signatures in a loopback registry as cosign attaches them; an
// archive imported with a Sigstore bundle of its own.
func TestCosignSignedCharts(t *testing.T) {
	cp := controlplane.Start(t)
	startCompositor(t, cp, func(o *app.ServeOptions) {
		o.Controllers = app.ControllersInProcess
		o.Poll = time.Second
	})
	ctx := context.Background()

	dir := t.TempDir()
	require.NoError(t, samplecharts.Package(dir))
	archivePath := filepath.Join(dir, "fireworks-app-1.1.5.tgz")
	archive, err := os.ReadFile(archivePath)
	require.NoError(t, err)
	registry := chartserver.NewRegistry(t, chartserver.RegistryOptions{})
	chartURL, err := registry.Push(archive, "charts")
	require.NoError(t, err)
	target := signing.CosignTargetOf(registry, chartURL, "1.1.5")

	key, err := signing.NewCosignKey()
	require.NoError(t, err)
	manifestDigest, err := signing.CosignSignChart(ctx, target, key)
	require.NoError(t, err)
	authority, err := signing.NewCosignAuthority()
	require.NoError(t, err)
	const issuer, subject = "https://issuer.example.com", "release@example.com"
	identity, err := authority.Identity(issuer, subject)
	require.NoError(t, err)
	_, err = signing.CosignSignChartLegacy(ctx, target, identity)
	require.NoError(t, err)
	trustedRoot, err := authority.TrustedRoot()
	require.NoError(t, err)

	keyless := func(namespace, subject string) string {
		return "{cosign: {keyless: {issuer: " + issuer + ", subject: " + subject + ", trustedRootRef: {name: chart-keys, namespace: " + namespace + ", key: trusted_root.json}}}}"
	}
	keySecret(t, cp, "by-key", "cosign.pub", key.PublicKeyPEM())
	keySecret(t, cp, "keyless", "trusted_root.json", trustedRoot)
	keySecret(t, cp, "keyless-other", "trusted_root.json", trustedRoot)
	other, err := signing.NewCosignKey()
	require.NoError(t, err)
	keySecret(t, cp, "other-key", "cosign.pub", other.PublicKeyPEM())
	for _, m := range []string{
		signedDefinition("by-key", chartURL, "", "{cosign: {keyRef: {name: chart-keys, namespace: by-key, key: cosign.pub}}}"),
		signedDefinition("keyless", chartURL, "", keyless("keyless", subject)),
		signedDefinition("keyless-other", chartURL, "", keyless("keyless-other", "someone-else@example.com")),
		signedDefinition("other-key", chartURL, "", "{cosign: {keyRef: {name: chart-keys, namespace: other-key, key: cosign.pub}}}"),
	} {
		res := cp.Kubectl(ctx, m, "apply", "-f", "-")
		require.NoError(t, res.Err, res.Stderr)
	}
	for _, ns := range []string{"by-key", "keyless"} {
		res := cp.Kubectl(ctx, "", "wait", "compositiondefinition", "fireworksapp-1-1-5", "-n", ns, "--for", "condition=Ready=True", "--timeout", "120s")
		require.NoError(t, res.Err, res.Stderr)
	}
	byKey := definitionIn(t, cp, "by-key").Status.Verification
	require.NotNil(t, byKey)
	assert.Equal(t, "CosignKey", byKey.Method)
	assert.Equal(t, key.Fingerprint(), byKey.KeyFingerprint)
	assert.Equal(t, manifestDigest, byKey.ManifestDigest)
	assert.Equal(t, definitionIn(t, cp, "by-key").Status.Digest, byKey.Digest)
	byIdentity := definitionIn(t, cp, "keyless").Status.Verification
	require.NotNil(t, byIdentity)
	assert.Equal(t, "CosignKeyless", byIdentity.Method)
	assert.Equal(t, subject, byIdentity.Subject)
	assert.Equal(t, issuer, byIdentity.Issuer)
	assert.NotNil(t, byIdentity.SignedAt, "a keyless signature's time is proven")

	requireRefused(t, cp, "keyless-other", "ChartSignedByUnexpectedIdentity", "someone-else@example.com")
	requireRefused(t, cp, "other-key", "ChartSignedByUnknownKey", "")

	t.Run("an imported archive with its Sigstore bundle", func(t *testing.T) {
		bundle, err := key.SignBlobBundle(archive)
		require.NoError(t, err)
		files := t.TempDir()
		bundlePath, keyPath := filepath.Join(files, "chart.sigstore.json"), filepath.Join(files, "cosign.pub")
		require.NoError(t, os.WriteFile(bundlePath, bundle, 0o644))
		require.NoError(t, os.WriteFile(keyPath, key.PublicKeyPEM(), 0o644))
		var out bytes.Buffer
		require.NoError(t, app.RunImport(ctx, &out, &app.ImportOptions{Namespace: "compositor-system", Kubeconfig: cp.Kubeconfig,
			Signature: app.SignatureOptions{Bundle: bundlePath, Key: keyPath}}, archivePath))
		assert.Contains(t, out.String(), "CosignKey signature of sha256:")

		keySecret(t, cp, "imported-bundle", "cosign.pub", key.PublicKeyPEM())
		res := cp.Kubectl(ctx, signedDefinition("imported-bundle", "imported://fireworks-app", "",
			"{cosign: {keyRef: {name: chart-keys, namespace: imported-bundle, key: cosign.pub}}}"), "apply", "-f", "-")
		require.NoError(t, res.Err, res.Stderr)
		res = cp.Kubectl(ctx, "", "wait", "compositiondefinition", "fireworksapp-1-1-5", "-n", "imported-bundle", "--for", "condition=Ready=True", "--timeout", "120s")
		require.NoError(t, res.Err, res.Stderr)
		v := definitionIn(t, cp, "imported-bundle").Status.Verification
		require.NotNil(t, v)
		assert.Equal(t, "CosignKey", v.Method)
		assert.Empty(t, v.ManifestDigest, "a blob bundle names no manifest")
	})
}

// tamper writes into dir a repository whose fireworks-app 1.1.5 has other content
// than the one prov signed, with prov beside it.
func tamper(t *testing.T, dir string, prov []byte) {
	t.Helper()
	ch, err := samplecharts.Load("1.1.5")
	require.NoError(t, err)
	for i, tpl := range ch.Templates {
		if tpl.Name == "templates/configmap.yaml" {
			ch.Templates[i] = &chartcommon.File{Name: tpl.Name, Data: append(append([]byte{}, tpl.Data...), []byte("\n  injected: \"yes\"\n")...)}
		}
	}
	path, err := chartutil.Save(ch, dir)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path+".prov", prov, 0o644))
	index, err := repo.IndexDirectory(dir, "")
	require.NoError(t, err)
	require.NoError(t, index.WriteFile(filepath.Join(dir, "index.yaml"), 0o644))
}
