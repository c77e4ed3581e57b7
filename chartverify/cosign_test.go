package chartverify_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/compositor-dev/compositor/chartfetch"
	"github.com/compositor-dev/compositor/chartverify"
	"github.com/compositor-dev/compositor/test/chartserver"
	"github.com/compositor-dev/compositor/test/samplecharts"
	"github.com/compositor-dev/compositor/test/signing"
)

const (
	ciIssuer  = "https://token.actions.example.test"
	ciSubject = "release@charts.example.test"
)

// ociCharts is the sample chart pushed, in two versions, to a loopback registry, with
// a fetcher allowed to reach it.
type ociCharts struct {
	t        testing.TB
	reg      *chartserver.Registry
	chartURL string
	fetcher  *chartfetch.Fetcher
	archives map[string][]byte // by version
}

// The two versions signed and fetched.
const (
	v1 = "1.1.5"
	v2 = "2.0.0"
)

func newOCICharts(t testing.TB) *ociCharts {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, samplecharts.Package(dir))
	c := &ociCharts{t: t, reg: chartserver.NewRegistry(t, chartserver.RegistryOptions{}), archives: map[string][]byte{}}
	for _, v := range []string{v1, v2} {
		archive, err := os.ReadFile(filepath.Join(dir, samplecharts.ChartName+"-"+v+".tgz"))
		require.NoError(t, err)
		c.archives[v] = archive
		c.chartURL = c.reg.MustPush(t, archive, "charts")
	}
	f, err := chartfetch.New(chartfetch.Options{AllowNetworks: chartfetch.LoopbackNetworks()})
	require.NoError(t, err)
	c.fetcher = f
	return c
}

func (c *ociCharts) ref(version string) chartfetch.Ref {
	return chartfetch.Ref{URL: c.chartURL, Version: version}
}

func (c *ociCharts) target(version string) signing.CosignTarget {
	return signing.CosignTargetOf(c.reg, c.chartURL, version)
}

// fetch fetches the chart at version and its signatures, as the controller does.
func (c *ociCharts) fetch(version string) (string, *chartfetch.Signatures) {
	c.t.Helper()
	res, err := c.fetcher.Fetch(testCtx(c.t), c.ref(version))
	require.NoError(c.t, err)
	sigs, err := c.fetcher.FetchSignatures(testCtx(c.t), c.ref(version), res)
	require.NoError(c.t, err)
	return res.Digest, sigs
}

func (c *ociCharts) manifest(version string) (string, []byte) {
	c.t.Helper()
	d, raw, err := c.target(version).Manifest(testCtx(c.t))
	require.NoError(c.t, err)
	return d, raw
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func newCosignKey(t testing.TB) *signing.CosignKey {
	t.Helper()
	k, err := signing.NewCosignKey()
	require.NoError(t, err)
	return k
}

// keyless is a private Sigstore and the policy trusting it for ciIssuer/ciSubject.
type keyless struct {
	authority *signing.CosignAuthority
	root      []byte
}

func newKeyless(t testing.TB) *keyless {
	t.Helper()
	a, err := signing.NewCosignAuthority()
	require.NoError(t, err)
	root, err := a.TrustedRoot()
	require.NoError(t, err)
	return &keyless{authority: a, root: root}
}

func (k *keyless) identity(t testing.TB, issuer, subject string) *signing.CosignIdentity {
	t.Helper()
	id, err := k.authority.Identity(issuer, subject)
	require.NoError(t, err)
	return id
}

func (k *keyless) policy() chartverify.CosignPolicy {
	return chartverify.CosignPolicy{Keyless: &chartverify.Keyless{Issuer: ciIssuer, Subject: ciSubject, TrustedRoot: k.root}}
}

func keyPolicy(k *signing.CosignKey) chartverify.CosignPolicy {
	return chartverify.CosignPolicy{PublicKey: k.PublicKeyPEM()}
}

func digestOfBytes(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// requireRefused checks err is a refusal for reason whose message holds every want.
func requireRefused(t testing.TB, err error, reason chartverify.Reason, want ...string) {
	t.Helper()
	require.Error(t, err)
	var refusal *chartverify.Error
	require.ErrorAs(t, err, &refusal, "%v", err)
	assert.Equal(t, reason, refusal.Reason, "%v", err)
	for _, w := range want {
		assert.Contains(t, err.Error(), w)
	}
}

func TestVerifyOCIAccepts(t *testing.T) {
	c := newOCICharts(t)
	ctx := testCtx(t)
	key := newCosignKey(t)
	kl := newKeyless(t)

	t.Run("a key's signature among the referrers", func(t *testing.T) {
		manifestDigest, err := signing.CosignSignChart(ctx, c.target(v1), key)
		require.NoError(t, err)
		archiveDigest, sigs := c.fetch(v1)
		require.Len(t, sigs.Bundles, 1)

		id, err := chartverify.VerifyOCI(archiveDigest, sigs, keyPolicy(key))
		require.NoError(t, err)
		assert.Equal(t, chartverify.Identity{
			Method:         chartverify.MethodCosignKey,
			Digest:         archiveDigest,
			ManifestDigest: manifestDigest,
			KeyFingerprint: key.Fingerprint(),
		}, id, "no timestamp proves when a key signed")
		assert.Equal(t, digestOfBytes(c.archives[v1]), id.Digest)
	})

	t.Run("a key's signature under the legacy .sig tag", func(t *testing.T) {
		other := newCosignKey(t)
		manifestDigest, err := signing.CosignSignChartLegacy(ctx, c.target(v2), other)
		require.NoError(t, err)
		archiveDigest, sigs := c.fetch(v2)
		require.Len(t, sigs.Legacy, 1)
		require.Empty(t, sigs.Bundles)

		id, err := chartverify.VerifyOCI(archiveDigest, sigs, keyPolicy(other))
		require.NoError(t, err)
		assert.Equal(t, chartverify.MethodCosignKey, id.Method)
		assert.Equal(t, manifestDigest, id.ManifestDigest)
		assert.Equal(t, other.Fingerprint(), id.KeyFingerprint)
	})

	t.Run("a message signature over the manifest", func(t *testing.T) {
		k := newCosignKey(t)
		_, manifest := c.manifest(v1)
		b, err := signing.CosignMessageBundle(k, manifest)
		require.NoError(t, err)
		require.NoError(t, c.target(v1).AttachBundle(ctx, b))
		archiveDigest, sigs := c.fetch(v1)

		id, err := chartverify.VerifyOCI(archiveDigest, sigs, keyPolicy(k))
		require.NoError(t, err, "one of the bundles is the key's")
		assert.Equal(t, k.Fingerprint(), id.KeyFingerprint)
	})

	t.Run("keyless, among the referrers", func(t *testing.T) {
		before := time.Now().Add(-time.Second)
		manifestDigest, err := signing.CosignSignChart(ctx, c.target(v1), kl.identity(t, ciIssuer, ciSubject))
		require.NoError(t, err)
		archiveDigest, sigs := c.fetch(v1)

		id, err := chartverify.VerifyOCI(archiveDigest, sigs, kl.policy())
		require.NoError(t, err)
		assert.Equal(t, chartverify.MethodCosignKeyless, id.Method)
		assert.Equal(t, ciIssuer, id.Issuer)
		assert.Equal(t, ciSubject, id.Subject)
		assert.Equal(t, archiveDigest, id.Digest)
		assert.Equal(t, manifestDigest, id.ManifestDigest)
		assert.Empty(t, id.KeyFingerprint)
		assert.WithinRange(t, id.SignedAt, before.Truncate(time.Second), time.Now(), "the timestamp authority's time")
	})

	t.Run("keyless, under the legacy .sig tag with a Rekor bundle", func(t *testing.T) {
		_, err := signing.CosignSignChartLegacy(ctx, c.target(v2), kl.identity(t, ciIssuer, ciSubject))
		require.NoError(t, err)
		archiveDigest, sigs := c.fetch(v2)

		id, err := chartverify.VerifyOCI(archiveDigest, sigs, kl.policy())
		require.NoError(t, err)
		assert.Equal(t, chartverify.MethodCosignKeyless, id.Method)
		assert.Equal(t, ciSubject, id.Subject)
		assert.False(t, id.SignedAt.IsZero(), "the log's integrated time")
	})

	t.Run("keyless, by a subject expression", func(t *testing.T) {
		archiveDigest, sigs := c.fetch(v1)
		p := kl.policy()
		p.Keyless.Subject, p.Keyless.SubjectRegExp = "", `[a-z]+@charts\.example\.test`
		id, err := chartverify.VerifyOCI(archiveDigest, sigs, p)
		require.NoError(t, err)
		assert.Equal(t, ciSubject, id.Subject)
	})
}

func TestVerifyOCIRefuses(t *testing.T) {
	c := newOCICharts(t)
	ctx := testCtx(t)
	key := newCosignKey(t)
	kl := newKeyless(t)

	t.Run("unsigned", func(t *testing.T) {
		archiveDigest, sigs := c.fetch(v1)
		_, err := chartverify.VerifyOCI(archiveDigest, sigs, keyPolicy(key))
		requireRefused(t, err, chartverify.ReasonUnsigned, sigs.ManifestDigest)
		_, err = chartverify.VerifyOCI(archiveDigest, sigs, kl.policy())
		requireRefused(t, err, chartverify.ReasonUnsigned)
	})

	// v1 is signed by key, keyless and legacy; v2 receives copies of v1's signatures.
	v1Digest, err := signing.CosignSignChart(ctx, c.target(v1), key)
	require.NoError(t, err)
	keylessID := kl.identity(t, ciIssuer, ciSubject)
	_, err = signing.CosignSignChart(ctx, c.target(v1), keylessID)
	require.NoError(t, err)

	t.Run("a signature of another manifest", func(t *testing.T) {
		for name, signer := range map[string]signing.CosignSigner{"key": key, "keyless": keylessID} {
			t.Run(name, func(t *testing.T) {
				c := newOCICharts(t)
				d1, _ := c.manifest(v1)
				b, err := signing.CosignStatementBundle(signer, d1)
				require.NoError(t, err)
				require.NoError(t, c.target(v2).AttachBundle(ctx, b))
				archiveDigest, sigs := c.fetch(v2)

				p := keyPolicy(key)
				if name == "keyless" {
					p = kl.policy()
				}
				_, err = chartverify.VerifyOCI(archiveDigest, sigs, p)
				requireRefused(t, err, chartverify.ReasonTampered, d1, sigs.ManifestDigest)
			})
		}
		t.Run("legacy", func(t *testing.T) {
			c := newOCICharts(t)
			d1, _ := c.manifest(v1)
			layer, err := signing.CosignLegacyLayerFor(key, c.target(v1).Repository, d1)
			require.NoError(t, err)
			require.NoError(t, c.target(v2).AttachLegacy(ctx, layer))
			archiveDigest, sigs := c.fetch(v2)
			_, err = chartverify.VerifyOCI(archiveDigest, sigs, keyPolicy(key))
			requireRefused(t, err, chartverify.ReasonTampered, d1)
		})
	})

	t.Run("a signed manifest whose chart layer is another archive", func(t *testing.T) {
		_, sigs := c.fetch(v1) // signed
		_, err := chartverify.VerifyOCI(digestOfBytes(c.archives[v2]), sigs, keyPolicy(key))
		requireRefused(t, err, chartverify.ReasonTampered, digestOfBytes(c.archives[v1]))
	})

	t.Run("a manifest that is not the one its digest names", func(t *testing.T) {
		archiveDigest, sigs := c.fetch(v1)
		sigs.Manifest = append(bytes.Clone(sigs.Manifest), '\n')
		_, err := chartverify.VerifyOCI(archiveDigest, sigs, keyPolicy(key))
		requireRefused(t, err, chartverify.ReasonTampered, v1Digest)
	})

	t.Run("another key", func(t *testing.T) {
		archiveDigest, sigs := c.fetch(v1)
		other := newCosignKey(t)
		_, err := chartverify.VerifyOCI(archiveDigest, sigs, keyPolicy(other))
		requireRefused(t, err, chartverify.ReasonWrongKey, other.Fingerprint(), "bundle 1", "bundle 2")

		c2 := newOCICharts(t)
		_, err = signing.CosignSignChartLegacy(ctx, c2.target(v1), key)
		require.NoError(t, err)
		archiveDigest, sigs = c2.fetch(v1)
		_, err = chartverify.VerifyOCI(archiveDigest, sigs, keyPolicy(other))
		requireRefused(t, err, chartverify.ReasonWrongKey, "sha256-<digest>.sig signature 1")
	})

	t.Run("a key's signature where keyless is asked", func(t *testing.T) {
		c := newOCICharts(t)
		_, err := signing.CosignSignChart(ctx, c.target(v1), key)
		require.NoError(t, err)
		archiveDigest, sigs := c.fetch(v1)
		_, err = chartverify.VerifyOCI(archiveDigest, sigs, kl.policy())
		requireRefused(t, err, chartverify.ReasonWrongIdentity, "not keyless")
	})

	t.Run("another identity", func(t *testing.T) {
		for name, signer := range map[string]*signing.CosignIdentity{
			"issuer":                        kl.identity(t, "https://accounts.example.test", ciSubject),
			"subject":                       kl.identity(t, ciIssuer, "intruder@elsewhere.example.test"),
			"subject matching only in part": kl.identity(t, ciIssuer, "x"+ciSubject+".evil.test"),
		} {
			t.Run(name, func(t *testing.T) {
				c := newOCICharts(t)
				_, err := signing.CosignSignChart(ctx, c.target(v1), signer)
				require.NoError(t, err)
				_, err = signing.CosignSignChartLegacy(ctx, c.target(v1), signer)
				require.NoError(t, err)
				archiveDigest, sigs := c.fetch(v1)

				_, err = chartverify.VerifyOCI(archiveDigest, sigs, kl.policy())
				requireRefused(t, err, chartverify.ReasonWrongIdentity, signer.Certificate().EmailAddresses[0])
				p := kl.policy()
				p.Keyless.Subject, p.Keyless.SubjectRegExp = "", `[a-z]+@charts\.example\.test`
				_, err = chartverify.VerifyOCI(archiveDigest, sigs, p)
				requireRefused(t, err, chartverify.ReasonWrongIdentity)
			})
		}
		t.Run("a certificate from another authority", func(t *testing.T) {
			c := newOCICharts(t)
			stranger := newKeyless(t).identity(t, ciIssuer, ciSubject)
			_, err := signing.CosignSignChart(ctx, c.target(v1), stranger)
			require.NoError(t, err)
			archiveDigest, sigs := c.fetch(v1)
			_, err = chartverify.VerifyOCI(archiveDigest, sigs, kl.policy())
			requireRefused(t, err, chartverify.ReasonWrongIdentity, "does not chain")
		})
		t.Run("a keyless signature where a key is asked", func(t *testing.T) {
			c := newOCICharts(t)
			_, err := signing.CosignSignChart(ctx, c.target(v1), keylessID)
			require.NoError(t, err)
			archiveDigest, sigs := c.fetch(v1)
			_, err = chartverify.VerifyOCI(archiveDigest, sigs, keyPolicy(key))
			requireRefused(t, err, chartverify.ReasonWrongKey, "certificate")
		})
	})

	t.Run("an expired certificate", func(t *testing.T) {
		c := newOCICharts(t)
		expired, err := kl.authority.IdentityAt(ciIssuer, ciSubject, time.Now().Add(-30*time.Minute))
		require.NoError(t, err)
		_, err = signing.CosignSignChart(ctx, c.target(v1), expired)
		require.NoError(t, err)
		archiveDigest, sigs := c.fetch(v1)
		_, err = chartverify.VerifyOCI(archiveDigest, sigs, kl.policy())
		requireRefused(t, err, chartverify.ReasonExpired, "valid from")

		_, err = signing.CosignSignChartLegacy(ctx, c.target(v2), expired)
		require.NoError(t, err)
		archiveDigest, sigs = c.fetch(v2)
		_, err = chartverify.VerifyOCI(archiveDigest, sigs, kl.policy())
		requireRefused(t, err, chartverify.ReasonExpired)
	})

	t.Run("garbage", func(t *testing.T) {
		archiveDigest, sigs := c.fetch(v2)
		sigs.Bundles = [][]byte{[]byte("{not a bundle"), []byte(`{"mediaType":"application/vnd.dev.sigstore.bundle.v0.3+json"}`)}
		sigs.Legacy = []chartfetch.LegacySignature{{Payload: []byte("{}"), Signature: "!!"}}
		_, err := chartverify.VerifyOCI(archiveDigest, sigs, keyPolicy(key))
		requireRefused(t, err, chartverify.ReasonInvalid, "bundle 1", "bundle 2", "signature 1")
		_, err = chartverify.VerifyOCI(archiveDigest, sigs, kl.policy())
		requireRefused(t, err, chartverify.ReasonInvalid)
	})

	t.Run("the most specific reason wins, the others are named", func(t *testing.T) {
		c := newOCICharts(t)
		other := newCosignKey(t)
		_, err := signing.CosignSignChart(ctx, c.target(v2), other) // another key
		require.NoError(t, err)
		d1, _ := c.manifest(v1)
		b, err := signing.CosignStatementBundle(key, d1) // the key, another manifest
		require.NoError(t, err)
		require.NoError(t, c.target(v2).AttachBundle(ctx, b))
		archiveDigest, sigs := c.fetch(v2)
		sigs.Bundles = append(sigs.Bundles, []byte("garbage"))

		_, err = chartverify.VerifyOCI(archiveDigest, sigs, keyPolicy(key))
		requireRefused(t, err, chartverify.ReasonTampered, "also", string(chartverify.ReasonWrongKey), string(chartverify.ReasonInvalid))
	})
}

func TestCosignPolicyMustBeUsable(t *testing.T) {
	c := newOCICharts(t)
	archiveDigest, sigs := c.fetch(v1)
	key := newCosignKey(t)
	root := newKeyless(t).root
	for name, p := range map[string]chartverify.CosignPolicy{
		"nothing":            {},
		"both":               {PublicKey: key.PublicKeyPEM(), Keyless: &chartverify.Keyless{Issuer: ciIssuer, Subject: ciSubject, TrustedRoot: root}},
		"a key that is not":  {PublicKey: []byte("-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n")},
		"no issuer":          {Keyless: &chartverify.Keyless{Subject: ciSubject, TrustedRoot: root}},
		"no subject":         {Keyless: &chartverify.Keyless{Issuer: ciIssuer, TrustedRoot: root}},
		"no trusted root":    {Keyless: &chartverify.Keyless{Issuer: ciIssuer, Subject: ciSubject}},
		"a root that is not": {Keyless: &chartverify.Keyless{Issuer: ciIssuer, Subject: ciSubject, TrustedRoot: []byte(`{"mediaType":"x"}`)}},
		"a bad expression":   {Keyless: &chartverify.Keyless{Issuer: ciIssuer, SubjectRegExp: "(", TrustedRoot: root}},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := chartverify.VerifyOCI(archiveDigest, sigs, p)
			requireRefused(t, err, chartverify.ReasonInvalid)
			_, err = chartverify.VerifyBlobBundle(c.archives[v1], []byte("{}"), p)
			requireRefused(t, err, chartverify.ReasonInvalid)
		})
	}
}

func TestVerifyBlobBundle(t *testing.T) {
	archive, err := os.ReadFile(filepath.Join(func() string {
		dir := t.TempDir()
		require.NoError(t, samplecharts.Package(dir))
		return dir
	}(), samplecharts.ChartName+"-"+v1+".tgz"))
	require.NoError(t, err)
	key := newCosignKey(t)
	kl := newKeyless(t)

	t.Run("key", func(t *testing.T) {
		b, err := key.SignBlobBundle(archive)
		require.NoError(t, err)
		id, err := chartverify.VerifyBlobBundle(archive, b, keyPolicy(key))
		require.NoError(t, err)
		assert.Equal(t, chartverify.Identity{Method: chartverify.MethodCosignKey, Digest: digestOfBytes(archive), KeyFingerprint: key.Fingerprint()}, id)

		_, err = chartverify.VerifyBlobBundle(archive, b, keyPolicy(newCosignKey(t)))
		requireRefused(t, err, chartverify.ReasonWrongKey)
	})
	t.Run("keyless", func(t *testing.T) {
		b, err := kl.identity(t, ciIssuer, ciSubject).SignBlobBundle(archive)
		require.NoError(t, err)
		id, err := chartverify.VerifyBlobBundle(archive, b, kl.policy())
		require.NoError(t, err)
		assert.Equal(t, chartverify.MethodCosignKeyless, id.Method)
		assert.Equal(t, ciSubject, id.Subject)
		assert.Equal(t, ciIssuer, id.Issuer)
		assert.Empty(t, id.ManifestDigest)
	})
	t.Run("tampered", func(t *testing.T) {
		b, err := key.SignBlobBundle(archive)
		require.NoError(t, err)
		changed := append(bytes.Clone(archive), 0)
		_, err = chartverify.VerifyBlobBundle(changed, b, keyPolicy(key))
		requireRefused(t, err, chartverify.ReasonTampered, digestOfBytes(archive), digestOfBytes(changed))

		b, err = kl.identity(t, ciIssuer, ciSubject).SignBlobBundle(archive)
		require.NoError(t, err)
		_, err = chartverify.VerifyBlobBundle(changed, b, kl.policy())
		requireRefused(t, err, chartverify.ReasonTampered)
	})
	t.Run("missing or unreadable", func(t *testing.T) {
		_, err := chartverify.VerifyBlobBundle(archive, nil, keyPolicy(key))
		requireRefused(t, err, chartverify.ReasonUnsigned)
		_, err = chartverify.VerifyBlobBundle(archive, []byte(`{"base64Signature":"AAAA","cert":""}`), keyPolicy(key))
		requireRefused(t, err, chartverify.ReasonInvalid, "new-bundle-format")
	})
}

// FuzzVerifyOCI feeds VerifyOCI real signature material (a chart signed with a key,
// keyless, in a bundle and under the legacy tag) with fuzzed bytes: it must never
// panic, only ever refuse with a Reason, and accept nothing but intact material.
func FuzzVerifyOCI(f *testing.F) {
	c := newOCICharts(f)
	ctx := testCtx(f)
	key := newCosignKey(f)
	kl := newKeyless(f)
	signer := kl.identity(f, ciIssuer, ciSubject)
	for _, s := range []signing.CosignSigner{key, signer} {
		_, err := signing.CosignSignChart(ctx, c.target(v1), s)
		require.NoError(f, err)
		_, err = signing.CosignSignChartLegacy(ctx, c.target(v1), s)
		require.NoError(f, err)
	}
	archiveDigest, sigs := c.fetch(v1)
	require.Len(f, sigs.Bundles, 2)
	require.Len(f, sigs.Legacy, 2)
	for i := range 2 {
		l := sigs.Legacy[i]
		f.Add(sigs.Manifest, sigs.Bundles[i], l.Payload, l.Signature, l.Certificate, l.RekorBundle)
	}
	policies := []chartverify.CosignPolicy{keyPolicy(key), kl.policy()}

	f.Fuzz(func(t *testing.T, manifest, bundleJSON, payload []byte, sig string, cert, rekor []byte) {
		fuzzed := &chartfetch.Signatures{
			ManifestDigest: digestOfBytes(manifest),
			Manifest:       manifest,
			Bundles:        [][]byte{bundleJSON},
			Legacy:         []chartfetch.LegacySignature{{Payload: payload, Signature: sig, Certificate: cert, RekorBundle: rekor}},
		}
		for _, p := range policies {
			id, err := chartverify.VerifyOCI(archiveDigest, fuzzed, p)
			if err != nil {
				var refusal *chartverify.Error
				require.ErrorAs(t, err, &refusal)
				require.NotEmpty(t, refusal.Reason)
				continue
			}
			require.Equal(t, sigs.ManifestDigest, id.ManifestDigest, "accepted only the signed manifest")
			require.Equal(t, archiveDigest, id.Digest)
		}
	})
}
