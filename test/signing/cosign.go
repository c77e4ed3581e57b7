package signing

// Cosign signatures, made with sigstore's Go libraries the way cosign makes them, so
// that chart verification is tested against real material: a key pair as `cosign
// generate-key-pair` makes, a private Sigstore (Fulcio-like CA, timestamp authority and
// Rekor-like log key, built with sigstore-go's test CA helpers) for keyless signatures,
// and the OCI layouts cosign publishes: a Sigstore bundle attached as a referrer of the
// chart manifest, and the legacy sha256-<hex>.sig tag.

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"net/http"
	"strings"
	"time"

	"github.com/cyberphone/json-canonicalization/go/src/webpki.org/jsoncanonicalizer"
	"github.com/digitorus/timestamp"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/secure-systems-lab/go-securesystemslib/dsse"
	protobundle "github.com/sigstore/protobuf-specs/gen/pb-go/bundle/v1"
	protocommon "github.com/sigstore/protobuf-specs/gen/pb-go/common/v1"
	protodsse "github.com/sigstore/protobuf-specs/gen/pb-go/dsse"
	"github.com/sigstore/sigstore-go/pkg/root"
	"github.com/sigstore/sigstore-go/pkg/testing/ca"
	"github.com/sigstore/sigstore-go/pkg/tlog"
	"github.com/sigstore/sigstore/pkg/cryptoutils"
	"github.com/sigstore/sigstore/pkg/signature/payload"
	"google.golang.org/protobuf/encoding/protojson"
	"oras.land/oras-go/v2"
	"oras.land/oras-go/v2/content"
	"oras.land/oras-go/v2/errdef"
	"oras.land/oras-go/v2/registry/remote"
	"oras.land/oras-go/v2/registry/remote/auth"
	"oras.land/oras-go/v2/registry/remote/errcode"

	"github.com/compositor-dev/compositor/test/chartserver"
)

// Media types and annotations of cosign's material.
const (
	// CosignBundleMediaType is a Sigstore bundle's media type and, as a referrer, its
	// artifact type.
	CosignBundleMediaType = "application/vnd.dev.sigstore.bundle.v0.3+json"
	// CosignSimpleSigningMediaType is the media type of a legacy signature layer.
	CosignSimpleSigningMediaType = "application/vnd.dev.cosign.simplesigning.v1+json"
	// CosignStatementPredicate is the predicate type of the in-toto statement
	// `cosign sign` signs since cosign v3.
	CosignStatementPredicate = "https://sigstore.dev/cosign/sign/v1"

	cosignInTotoPayloadType = "application/vnd.in-toto+json"
	cosignSignatureAnnot    = "dev.cosignproject.cosign/signature"
	cosignCertificateAnnot  = "dev.sigstore.cosign/certificate"
	cosignChainAnnot        = "dev.sigstore.cosign/chain"
	cosignRekorBundleAnnot  = "dev.sigstore.cosign/bundle"
	cosignLegacyConfigType  = "application/vnd.oci.image.config.v1+json"
)

// CosignSigner signs as cosign does: a *CosignKey with a key pair, a *CosignIdentity
// keyless with a certificate. Use it with CosignStatementBundle, CosignMessageBundle,
// CosignLegacyLayerFor and CosignSignChart.
type CosignSigner interface {
	// cosignSign signs message (ECDSA over its SHA-256).
	cosignSign(message []byte) ([]byte, error)
	// cosignMaterial is a bundle's verification material for signature.
	cosignMaterial(signature []byte) (*protobundle.VerificationMaterial, error)
	// cosignLegacyAnnotations are a legacy layer's annotations for signature over payload.
	cosignLegacyAnnotations(payload, signature []byte) (map[string]string, error)
}

// CosignKey is an ECDSA P-256 key pair, what `cosign generate-key-pair` makes.
type CosignKey struct {
	private   *ecdsa.PrivateKey
	publicPEM []byte
	der       []byte
}

// NewCosignKey generates a key pair.
func NewCosignKey() (*CosignKey, error) {
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	pemKey, err := cryptoutils.MarshalPublicKeyToPEM(priv.Public())
	if err != nil {
		return nil, err
	}
	der, err := x509.MarshalPKIXPublicKey(priv.Public())
	if err != nil {
		return nil, err
	}
	return &CosignKey{private: priv, publicPEM: pemKey, der: der}, nil
}

// PublicKeyPEM is the public key as cosign.pub holds it.
func (k *CosignKey) PublicKeyPEM() []byte { return bytes.Clone(k.publicPEM) }

// Fingerprint is "sha256:<hex>" of the public key's DER, as chartverify reports it.
func (k *CosignKey) Fingerprint() string { return cosignDigest(k.der) }

// SignBlobBundle is `cosign sign-blob --bundle` (new bundle format) of blob with the key.
func (k *CosignKey) SignBlobBundle(blob []byte) ([]byte, error) { return CosignMessageBundle(k, blob) }

func (k *CosignKey) cosignSign(message []byte) ([]byte, error) {
	sum := sha256.Sum256(message)
	return ecdsa.SignASN1(rand.Reader, k.private, sum[:])
}

// cosignMaterial names the key by a hint only: a verifier must bring the key itself.
func (k *CosignKey) cosignMaterial([]byte) (*protobundle.VerificationMaterial, error) {
	sum := sha256.Sum256(k.der)
	return &protobundle.VerificationMaterial{
		Content: &protobundle.VerificationMaterial_PublicKey{
			PublicKey: &protocommon.PublicKeyIdentifier{Hint: base64.StdEncoding.EncodeToString(sum[:])},
		},
	}, nil
}

func (k *CosignKey) cosignLegacyAnnotations(_, signature []byte) (map[string]string, error) {
	return map[string]string{cosignSignatureAnnot: base64.StdEncoding.EncodeToString(signature)}, nil
}

// CosignAuthority is a private Sigstore for keyless signatures: a root CA with a
// Fulcio-like intermediate that issues identity certificates, an RFC 3161 timestamp
// authority, and a transparency log key that signs entry timestamps. TrustedRoot is its
// trusted_root.json; nothing of it is reachable on a network.
type CosignAuthority struct {
	rootCert, fulcioCert *x509.Certificate
	fulcioKey            *ecdsa.PrivateKey
	tsaChain             []*x509.Certificate // leaf, intermediate
	tsaKey               *ecdsa.PrivateKey
	rekorKey             *ecdsa.PrivateKey
	rekorLogID           []byte
	start                time.Time
}

// NewCosignAuthority creates an authority. Its timestamp authority's certificate is
// valid for five minutes from now (sigstore-go's test CA makes it so): sign within them.
func NewCosignAuthority() (*CosignAuthority, error) {
	now := time.Now()
	rootCert, rootKey, err := ca.GenerateRootCa()
	if err != nil {
		return nil, err
	}
	fulcioCert, fulcioKey, err := cosignIntermediate(rootCert, rootKey, now)
	if err != nil {
		return nil, err
	}
	tsaInter, tsaInterKey, err := ca.GenerateTSAIntermediate(rootCert, rootKey)
	if err != nil {
		return nil, err
	}
	tsaKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tsaLeaf, err := ca.GenerateTSALeafCert(now.Add(-5*time.Minute), tsaKey, tsaInter, tsaInterKey)
	if err != nil {
		return nil, err
	}
	rekorKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	rekorDER, err := x509.MarshalPKIXPublicKey(rekorKey.Public())
	if err != nil {
		return nil, err
	}
	logID := sha256.Sum256(rekorDER)
	return &CosignAuthority{
		rootCert: rootCert, fulcioCert: fulcioCert, fulcioKey: fulcioKey,
		tsaChain: []*x509.Certificate{tsaLeaf, tsaInter}, tsaKey: tsaKey,
		rekorKey: rekorKey, rekorLogID: logID[:],
		start: now.Add(-time.Hour),
	}, nil
}

// cosignIntermediate issues a code-signing CA under the root, valid as long as the
// root, so that certificates issued in the past still chain to it.
func cosignIntermediate(rootCert *x509.Certificate, rootKey *ecdsa.PrivateKey, now time.Time) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(2),
		Subject:               pkix.Name{CommonName: "sigstore-intermediate", Organization: []string{"compositor test"}},
		NotBefore:             now.Add(-4 * time.Hour),
		NotAfter:              now.Add(4 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageCodeSigning},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, rootCert, key.Public(), rootKey)
	if err != nil {
		return nil, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	return cert, key, err
}

// TrustedRoot is the authority's trusted_root.json: its CA, timestamp authority and
// log, and no CT log (its certificates carry no SCT).
func (a *CosignAuthority) TrustedRoot() ([]byte, error) {
	fulcio := &root.FulcioCertificateAuthority{
		Root: a.rootCert, Intermediates: []*x509.Certificate{a.fulcioCert},
		ValidityPeriodStart: a.start, URI: "https://fulcio.sigstore.test",
	}
	tsa := &root.SigstoreTimestampingAuthority{
		Root: a.rootCert, Intermediates: a.tsaChain[1:], Leaf: a.tsaChain[0],
		ValidityPeriodStart: a.start, URI: "https://tsa.sigstore.test",
	}
	rekor := &root.TransparencyLog{
		BaseURL: "https://rekor.sigstore.test", ID: a.rekorLogID,
		ValidityPeriodStart: a.start, HashFunc: crypto.SHA256,
		PublicKey: a.rekorKey.Public(), SignatureHashFunc: crypto.SHA256,
	}
	tr, err := root.NewTrustedRoot(root.TrustedRootMediaType01,
		[]root.CertificateAuthority{fulcio}, nil,
		[]root.TimestampingAuthority{tsa},
		map[string]*root.TransparencyLog{hex.EncodeToString(a.rekorLogID): rekor})
	if err != nil {
		return nil, err
	}
	return tr.MarshalJSON()
}

// Identity issues a certificate for subject (an email SAN) from the OIDC issuer,
// valid from a minute ago for ten minutes, as Fulcio does after an OIDC login.
func (a *CosignAuthority) Identity(issuer, subject string) (*CosignIdentity, error) {
	return a.IdentityAt(issuer, subject, time.Now().Add(-time.Minute))
}

// IdentityAt issues the certificate valid for ten minutes from notBefore: one issued
// in the past has expired when it signs now.
func (a *CosignAuthority) IdentityAt(issuer, subject string, notBefore time.Time) (*CosignIdentity, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	cert, err := ca.GenerateLeafCert(subject, issuer, notBefore, key, a.fulcioCert, a.fulcioKey)
	if err != nil {
		return nil, err
	}
	return &CosignIdentity{authority: a, cert: cert, key: key}, nil
}

// CosignIdentity is a keyless signer: a short-lived certificate and its key. Its
// bundles carry an RFC 3161 timestamp of the signature; its legacy signatures a Rekor
// bundle (signed entry timestamp).
type CosignIdentity struct {
	authority *CosignAuthority
	cert      *x509.Certificate
	key       *ecdsa.PrivateKey
	// SignedAt is the time its timestamps state; zero means now.
	SignedAt time.Time
}

// Certificate is the signing certificate.
func (id *CosignIdentity) Certificate() *x509.Certificate { return id.cert }

// SignBlobBundle is `cosign sign-blob --bundle` (new bundle format) of blob, keyless.
func (id *CosignIdentity) SignBlobBundle(blob []byte) ([]byte, error) {
	return CosignMessageBundle(id, blob)
}

func (id *CosignIdentity) signedAt() time.Time {
	if id.SignedAt.IsZero() {
		return time.Now()
	}
	return id.SignedAt
}

func (id *CosignIdentity) cosignSign(message []byte) ([]byte, error) {
	sum := sha256.Sum256(message)
	return ecdsa.SignASN1(rand.Reader, id.key, sum[:])
}

func (id *CosignIdentity) cosignMaterial(signature []byte) (*protobundle.VerificationMaterial, error) {
	tsr, err := id.authority.timestampResponse(signature, id.signedAt())
	if err != nil {
		return nil, err
	}
	return &protobundle.VerificationMaterial{
		Content: &protobundle.VerificationMaterial_Certificate{
			Certificate: &protocommon.X509Certificate{RawBytes: id.cert.Raw},
		},
		TimestampVerificationData: &protobundle.TimestampVerificationData{
			Rfc3161Timestamps: []*protocommon.RFC3161SignedTimestamp{{SignedTimestamp: tsr}},
		},
	}, nil
}

func (id *CosignIdentity) cosignLegacyAnnotations(payload, signature []byte) (map[string]string, error) {
	certPEM, err := cryptoutils.MarshalCertificateToPEM(id.cert)
	if err != nil {
		return nil, err
	}
	chainPEM, err := cryptoutils.MarshalCertificatesToPEM([]*x509.Certificate{id.authority.fulcioCert, id.authority.rootCert})
	if err != nil {
		return nil, err
	}
	rekorBundle, err := id.authority.rekorBundle(payload, signature, certPEM, id.signedAt())
	if err != nil {
		return nil, err
	}
	return map[string]string{
		cosignSignatureAnnot:   base64.StdEncoding.EncodeToString(signature),
		cosignCertificateAnnot: string(certPEM),
		cosignChainAnnot:       string(chainPEM),
		cosignRekorBundleAnnot: string(rekorBundle),
	}, nil
}

// timestampResponse is the authority's RFC 3161 timestamp of signature at t.
func (a *CosignAuthority) timestampResponse(signature []byte, t time.Time) ([]byte, error) {
	sum := sha256.Sum256(signature)
	ts := timestamp.Timestamp{
		HashAlgorithm: crypto.SHA256,
		HashedMessage: sum[:],
		Time:          t,
		Policy:        asn1.ObjectIdentifier{1, 3, 6, 1, 4, 1, 57264, 2},
	}
	return ts.CreateResponseWithOpts(a.tsaChain[0], a.tsaKey, crypto.SHA256)
}

// rekorBundle is cosign's dev.sigstore.cosign/bundle annotation: a hashedrekord entry
// of the signature over payload, as if logged at t, and the log's signed entry
// timestamp over it.
func (a *CosignAuthority) rekorBundle(payload, signature, certPEM []byte, t time.Time) ([]byte, error) {
	sum := sha256.Sum256(payload)
	entry := map[string]any{
		"apiVersion": "0.0.1",
		"kind":       "hashedrekord",
		"spec": map[string]any{
			"data": map[string]any{"hash": map[string]any{"algorithm": "sha256", "value": hex.EncodeToString(sum[:])}},
			"signature": map[string]any{
				"content":   base64.StdEncoding.EncodeToString(signature),
				"publicKey": map[string]any{"content": base64.StdEncoding.EncodeToString(certPEM)},
			},
		},
	}
	body, err := cosignCanonicalJSON(entry)
	if err != nil {
		return nil, err
	}
	logged := tlog.RekorPayload{
		Body:           base64.StdEncoding.EncodeToString(body),
		IntegratedTime: t.Unix(),
		LogIndex:       42,
		LogID:          hex.EncodeToString(a.rekorLogID),
	}
	signed, err := cosignCanonicalJSON(logged)
	if err != nil {
		return nil, err
	}
	setSum := sha256.Sum256(signed)
	set, err := ecdsa.SignASN1(rand.Reader, a.rekorKey, setSum[:])
	if err != nil {
		return nil, err
	}
	return json.Marshal(map[string]any{"SignedEntryTimestamp": set, "Payload": logged})
}

func cosignCanonicalJSON(v any) ([]byte, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return jsoncanonicalizer.Transform(raw)
}

// CosignStatementBundle is what `cosign sign` attaches since cosign v3: a Sigstore
// bundle of a DSSE envelope holding an in-toto statement whose subject is digest
// ("sha256:<hex>", the manifest's).
func CosignStatementBundle(s CosignSigner, digest string) ([]byte, error) {
	hexDigest, ok := strings.CutPrefix(digest, "sha256:")
	if !ok {
		return nil, fmt.Errorf("digest %q is not sha256:<hex>", digest)
	}
	statement, err := json.Marshal(map[string]any{
		"_type":         "https://in-toto.io/Statement/v1",
		"subject":       []any{map[string]any{"name": "chart", "digest": map[string]string{"sha256": hexDigest}}},
		"predicateType": CosignStatementPredicate,
		"predicate":     map[string]any{},
	})
	if err != nil {
		return nil, err
	}
	sig, err := s.cosignSign(dsse.PAE(cosignInTotoPayloadType, statement))
	if err != nil {
		return nil, err
	}
	return cosignBundle(s, sig, func(b *protobundle.Bundle) {
		b.Content = &protobundle.Bundle_DsseEnvelope{DsseEnvelope: &protodsse.Envelope{
			Payload:     statement,
			PayloadType: cosignInTotoPayloadType,
			Signatures:  []*protodsse.Signature{{Sig: sig}},
		}}
	})
}

// CosignMessageBundle is a Sigstore bundle of a message signature over message: what
// `cosign sign-blob --bundle` writes for a file.
func CosignMessageBundle(s CosignSigner, message []byte) ([]byte, error) {
	sig, err := s.cosignSign(message)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(message)
	return cosignBundle(s, sig, func(b *protobundle.Bundle) {
		b.Content = &protobundle.Bundle_MessageSignature{MessageSignature: &protocommon.MessageSignature{
			MessageDigest: &protocommon.HashOutput{Algorithm: protocommon.HashAlgorithm_SHA2_256, Digest: sum[:]},
			Signature:     sig,
		}}
	})
}

// cosignBundle wraps a signature and its content (set by setContent) in a v0.3 bundle.
func cosignBundle(s CosignSigner, sig []byte, setContent func(*protobundle.Bundle)) ([]byte, error) {
	material, err := s.cosignMaterial(sig)
	if err != nil {
		return nil, err
	}
	b := &protobundle.Bundle{MediaType: CosignBundleMediaType, VerificationMaterial: material}
	setContent(b)
	return protojson.Marshal(b)
}

// CosignLegacyLayer is one layer of a legacy sha256-<hex>.sig manifest: the signed
// simplesigning payload and the annotations carrying the signature.
type CosignLegacyLayer struct {
	Payload     []byte
	Annotations map[string]string
}

// CosignLegacyLayerFor signs, as cosign before v3 did, a simplesigning payload naming
// digest ("sha256:<hex>") and the repository reference (host/path/name).
func CosignLegacyLayerFor(s CosignSigner, reference, digest string) (CosignLegacyLayer, error) {
	p, err := json.Marshal(payload.SimpleContainerImage{Critical: payload.Critical{
		Identity: payload.Identity{DockerReference: reference},
		Image:    payload.Image{DockerManifestDigest: digest},
		Type:     payload.CosignSignatureType,
	}})
	if err != nil {
		return CosignLegacyLayer{}, err
	}
	sig, err := s.cosignSign(p)
	if err != nil {
		return CosignLegacyLayer{}, err
	}
	annotations, err := s.cosignLegacyAnnotations(p, sig)
	if err != nil {
		return CosignLegacyLayer{}, err
	}
	return CosignLegacyLayer{Payload: p, Annotations: annotations}, nil
}

// CosignTarget is a chart pushed to an OCI registry, and how to reach the registry.
type CosignTarget struct {
	// Repository is host:port/path/name, the chart URL without oci://.
	Repository string
	// Tag is the chart version as tagged ("+" written "_").
	Tag string
	// Client reaches the registry (trusting its certificate).
	Client *http.Client
	// PlainHTTP speaks HTTP rather than HTTPS.
	PlainHTTP bool
	// Username and Password are the registry's basic auth, if it wants one.
	Username, Password string
}

// CosignTargetOf is the chart chartURL (oci://...) at version in reg. Set Username
// and Password when reg requires them.
func CosignTargetOf(reg *chartserver.Registry, chartURL, version string) CosignTarget {
	return CosignTarget{
		Repository: strings.TrimPrefix(chartURL, "oci://"),
		Tag:        strings.ReplaceAll(version, "+", "_"),
		Client:     reg.Client(),
		PlainHTTP:  reg.CAPEM == nil,
	}
}

func (t CosignTarget) repository() (*remote.Repository, error) {
	repo, err := remote.NewRepository(t.Repository)
	if err != nil {
		return nil, err
	}
	client := &auth.Client{Client: t.Client, Cache: auth.NewCache()}
	if t.Username != "" || t.Password != "" {
		client.Credential = auth.StaticCredential(repo.Reference.Registry,
			auth.Credential{Username: t.Username, Password: t.Password})
	}
	repo.Client = client
	repo.PlainHTTP = t.PlainHTTP
	repo.SkipReferrersGC = true // distribution refuses deletes; old indexes may stay
	return repo, nil
}

// Manifest returns the digest and raw bytes of the manifest the tag names.
func (t CosignTarget) Manifest(ctx context.Context) (string, []byte, error) {
	repo, err := t.repository()
	if err != nil {
		return "", nil, err
	}
	desc, raw, err := cosignFetchTagged(ctx, repo, t.Tag)
	if err != nil {
		return "", nil, err
	}
	return desc.Digest.String(), raw, nil
}

// AttachBundle attaches a Sigstore bundle to the tagged manifest as an OCI referrer,
// laid out as cosign's bundle specification says, whatever the bundle signs.
func (t CosignTarget) AttachBundle(ctx context.Context, bundleJSON []byte) error {
	repo, err := t.repository()
	if err != nil {
		return err
	}
	subject, _, err := cosignFetchTagged(ctx, repo, t.Tag)
	if err != nil {
		return err
	}
	layer, err := oras.PushBytes(ctx, repo, CosignBundleMediaType, bundleJSON)
	if err != nil {
		return fmt.Errorf("pushing the bundle: %w", err)
	}
	layer.Annotations = map[string]string{
		ocispec.AnnotationTitle: strings.ReplaceAll(layer.Digest.String(), ":", "-") + ".sigstore.json",
	}
	subject = ocispec.Descriptor{MediaType: subject.MediaType, Digest: subject.Digest, Size: subject.Size}
	_, err = oras.PackManifest(ctx, repo, oras.PackManifestVersion1_1, CosignBundleMediaType, oras.PackManifestOptions{
		Subject: &subject,
		Layers:  []ocispec.Descriptor{layer},
	})
	if err != nil {
		return fmt.Errorf("pushing the bundle's referrer manifest: %w", err)
	}
	return nil
}

// AttachLegacy adds layers to the tagged manifest's sha256-<hex>.sig signature
// manifest (creating it), as cosign before v3 did.
func (t CosignTarget) AttachLegacy(ctx context.Context, layers ...CosignLegacyLayer) error {
	repo, err := t.repository()
	if err != nil {
		return err
	}
	subject, _, err := cosignFetchTagged(ctx, repo, t.Tag)
	if err != nil {
		return err
	}
	sigTag := "sha256-" + subject.Digest.Encoded() + ".sig"
	var m ocispec.Manifest
	switch _, raw, err := cosignFetchTagged(ctx, repo, sigTag); {
	case err == nil:
		if err := json.Unmarshal(raw, &m); err != nil {
			return fmt.Errorf("reading %s: %w", sigTag, err)
		}
	case cosignIsNotFound(err):
		config, err := oras.PushBytes(ctx, repo, cosignLegacyConfigType, []byte("{}"))
		if err != nil {
			return fmt.Errorf("pushing the signature config: %w", err)
		}
		m = ocispec.Manifest{MediaType: ocispec.MediaTypeImageManifest, Config: config}
		m.SchemaVersion = 2
	default:
		return err
	}
	for _, l := range layers {
		desc, err := oras.PushBytes(ctx, repo, CosignSimpleSigningMediaType, l.Payload)
		if err != nil {
			return fmt.Errorf("pushing a signature payload: %w", err)
		}
		desc.Annotations = l.Annotations
		m.Layers = append(m.Layers, desc)
	}
	raw, err := json.Marshal(m)
	if err != nil {
		return err
	}
	if _, err := oras.TagBytes(ctx, repo, ocispec.MediaTypeImageManifest, raw, sigTag); err != nil {
		return fmt.Errorf("pushing %s: %w", sigTag, err)
	}
	return nil
}

// CosignSignChart signs the tagged chart manifest as `cosign sign` does since v3 (a
// DSSE in-toto statement bundle attached as a referrer) and returns its digest.
func CosignSignChart(ctx context.Context, t CosignTarget, s CosignSigner) (string, error) {
	digest, _, err := t.Manifest(ctx)
	if err != nil {
		return "", err
	}
	b, err := CosignStatementBundle(s, digest)
	if err != nil {
		return "", err
	}
	return digest, t.AttachBundle(ctx, b)
}

// CosignSignChartLegacy signs the tagged chart manifest as cosign did before v3 (a
// simplesigning layer under sha256-<hex>.sig) and returns its digest.
func CosignSignChartLegacy(ctx context.Context, t CosignTarget, s CosignSigner) (string, error) {
	digest, _, err := t.Manifest(ctx)
	if err != nil {
		return "", err
	}
	layer, err := CosignLegacyLayerFor(s, t.Repository, digest)
	if err != nil {
		return "", err
	}
	return digest, t.AttachLegacy(ctx, layer)
}

func cosignFetchTagged(ctx context.Context, repo *remote.Repository, tag string) (ocispec.Descriptor, []byte, error) {
	desc, rc, err := repo.FetchReference(ctx, tag)
	if err != nil {
		return ocispec.Descriptor{}, nil, err
	}
	defer rc.Close()
	raw, err := content.ReadAll(rc, desc)
	return desc, raw, err
}

func cosignIsNotFound(err error) bool {
	var er *errcode.ErrorResponse
	return errors.Is(err, errdef.ErrNotFound) || errors.As(err, &er) && er.StatusCode == http.StatusNotFound
}

func cosignDigest(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}
