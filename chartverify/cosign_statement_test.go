package chartverify_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"strings"
	"testing"

	"github.com/secure-systems-lab/go-securesystemslib/dsse"
	protobundle "github.com/sigstore/protobuf-specs/gen/pb-go/bundle/v1"
	protocommon "github.com/sigstore/protobuf-specs/gen/pb-go/common/v1"
	protodsse "github.com/sigstore/protobuf-specs/gen/pb-go/dsse"
	"github.com/sigstore/sigstore/pkg/cryptoutils"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/compositor-dev/compositor/chartfetch"
	"github.com/compositor-dev/compositor/chartverify"
	"github.com/compositor-dev/compositor/test/signing"
)

// ecdsaSigner is a P-256 key and the cosign policy trusting it.
type ecdsaSigner struct {
	key    *ecdsa.PrivateKey
	policy chartverify.CosignPolicy
}

func newECDSASigner(t testing.TB) ecdsaSigner {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	public, err := cryptoutils.MarshalPublicKeyToPEM(key.Public())
	require.NoError(t, err)
	return ecdsaSigner{key: key, policy: chartverify.CosignPolicy{PublicKey: public}}
}

// statementBundle is a Sigstore bundle (v0.3, a public key hint) of a DSSE in-toto
// statement of predicateType naming digests ("sha256:<hex>"), signed by s: what
// cosign attaches for `cosign sign` (predicate type signing.CosignStatementPredicate)
// and for `cosign attest` (another type), and what anyone who may push to the
// chart's repository can attach, up to chartfetch.MaxSignatureBytes.
func (s ecdsaSigner) statementBundle(t testing.TB, predicateType string, digests ...string) []byte {
	t.Helper()
	subjects := make([]any, 0, len(digests))
	for _, d := range digests {
		subjects = append(subjects, map[string]any{"name": "chart", "digest": map[string]string{"sha256": strings.TrimPrefix(d, "sha256:")}})
	}
	statement, err := json.Marshal(map[string]any{
		"_type": "https://in-toto.io/Statement/v1", "subject": subjects,
		"predicateType": predicateType, "predicate": map[string]any{"scanner": map[string]any{"result": map[string]any{"critical": 12}}},
	})
	require.NoError(t, err)
	pae := sha256.Sum256(dsse.PAE("application/vnd.in-toto+json", statement))
	sig, err := ecdsa.SignASN1(rand.Reader, s.key, pae[:])
	require.NoError(t, err)
	b, err := protojson.Marshal(&protobundle.Bundle{
		MediaType: signing.CosignBundleMediaType,
		VerificationMaterial: &protobundle.VerificationMaterial{Content: &protobundle.VerificationMaterial_PublicKey{
			PublicKey: &protocommon.PublicKeyIdentifier{Hint: "signer"},
		}},
		Content: &protobundle.Bundle_DsseEnvelope{DsseEnvelope: &protodsse.Envelope{
			Payload: statement, PayloadType: "application/vnd.in-toto+json", Signatures: []*protodsse.Signature{{Sig: sig}},
		}},
	})
	require.NoError(t, err)
	return b
}

// chartManifest is an OCI manifest of a Helm chart whose chart layer is
// archiveDigest, and its digest.
func chartManifest(t testing.TB, archiveDigest string) (string, []byte) {
	t.Helper()
	manifest, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.manifest.v1+json",
		"config":        map[string]any{"mediaType": "application/vnd.cncf.helm.config.v1+json", "digest": digestOfBytes([]byte("{}")), "size": 2},
		"layers":        []any{map[string]any{"mediaType": "application/vnd.cncf.helm.chart.content.v1.tar+gzip", "digest": archiveDigest, "size": 46}},
	})
	require.NoError(t, err)
	return digestOfBytes(manifest), manifest
}

const vulnPredicate = "https://cosign.sigstore.dev/attestation/vuln/v1"

// TestAttestationIsNotASignature: cosign attaches attestations (cosign attest
// --new-bundle-format: an SBOM, a vulnerability scan, SLSA provenance) exactly as it
// attaches signatures, as Sigstore bundle referrers of the manifest, and `cosign
// verify` tells them apart by the statement's predicate type
// (https://sigstore.dev/cosign/sign/v1). A scanner or CI whose key is the one a
// definition trusts, attesting about a chart it was merely asked to look at ("this
// chart has 12 critical vulnerabilities"), must not make that chart pass as signed.
func TestAttestationIsNotASignature(t *testing.T) {
	scanner := newECDSASigner(t)
	archiveDigest := digestOfBytes([]byte("a chart someone pushed and the scanner scanned"))
	manifestDigest, manifest := chartManifest(t, archiveDigest)
	verifyOCI := func(bundles ...[]byte) (chartverify.Identity, error) {
		return chartverify.VerifyOCI(archiveDigest, &chartfetch.Signatures{
			ManifestDigest: manifestDigest, Manifest: manifest, Bundles: bundles,
		}, scanner.policy)
	}

	t.Run("an attestation of the manifest", func(t *testing.T) {
		id, err := verifyOCI(scanner.statementBundle(t, vulnPredicate, manifestDigest))
		require.Error(t, err, "a vulnerability-scan attestation was accepted as the chart's signature: %+v", id)
		requireRefused(t, err, chartverify.ReasonUnsigned, "attestation", vulnPredicate, signing.CosignStatementPredicate)
	})
	t.Run("an attestation of another manifest", func(t *testing.T) {
		other, _ := chartManifest(t, digestOfBytes([]byte("another chart")))
		_, err := verifyOCI(scanner.statementBundle(t, vulnPredicate, other))
		requireRefused(t, err, chartverify.ReasonUnsigned, "attestation")
	})
	t.Run("an attestation of a blob", func(t *testing.T) {
		archive := []byte("an imported chart archive")
		_, err := chartverify.VerifyBlobBundle(archive, scanner.statementBundle(t, vulnPredicate, digestOfBytes(archive)), scanner.policy)
		requireRefused(t, err, chartverify.ReasonUnsigned, "attestation")
	})
	t.Run("a signature beside it", func(t *testing.T) {
		id, err := verifyOCI(scanner.statementBundle(t, vulnPredicate, manifestDigest),
			scanner.statementBundle(t, signing.CosignStatementPredicate, manifestDigest))
		require.NoError(t, err)
		require.Equal(t, manifestDigest, id.ManifestDigest)
	})
}
