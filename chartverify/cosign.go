package chartverify

import (
	"bytes"
	"crypto"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"regexp"
	"regexp/syntax"
	"slices"
	"strings"
	"time"

	"github.com/digitorus/timestamp"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	protocommon "github.com/sigstore/protobuf-specs/gen/pb-go/common/v1"
	protorekor "github.com/sigstore/protobuf-specs/gen/pb-go/rekor/v1"
	"github.com/sigstore/sigstore-go/pkg/bundle"
	"github.com/sigstore/sigstore-go/pkg/fulcio/certificate"
	"github.com/sigstore/sigstore-go/pkg/root"
	"github.com/sigstore/sigstore-go/pkg/tlog"
	"github.com/sigstore/sigstore-go/pkg/verify"
	"github.com/sigstore/sigstore/pkg/cryptoutils"
	"github.com/sigstore/sigstore/pkg/signature"
	"github.com/sigstore/sigstore/pkg/signature/payload"

	"github.com/compositor-dev/compositor/chartfetch"
)

// CosignPolicy says which cosign signatures a chart must carry: exactly one of
// PublicKey and Keyless is set.
type CosignPolicy struct {
	// PublicKey is the PEM public key (what `cosign generate-key-pair` writes to
	// cosign.pub) the signature must verify with. Key signatures are checked without a
	// transparency log or timestamp, which an air-gapped signer does not have.
	PublicKey []byte
	// Keyless asks for a signature whose certificate names an identity.
	Keyless *Keyless
}

// Keyless is a keyless (Fulcio certificate) signer: the certificate must chain to
// TrustedRoot, name Issuer and Subject, and have been valid when a timestamp from the
// same trusted root (a transparency log entry or an RFC 3161 timestamp) says the
// signature was made. Nothing is fetched: TrustedRoot is all that is trusted, so it
// works offline.
type Keyless struct {
	// Issuer is the OIDC issuer the certificate must name, exactly (e.g.
	// https://token.actions.githubusercontent.com).
	Issuer string
	// Subject is the certificate's subject (SAN: an email or a URI), exactly, or
	// SubjectRegExp a regular expression the whole subject must match (it is anchored
	// at both ends, unlike cosign's --certificate-identity-regexp). At least one is set.
	Subject       string
	SubjectRegExp string
	// TrustedRoot is a Sigstore trusted_root.json (`cosign trusted-root create`, or the
	// public-good instance's from its TUF repository): the Fulcio CAs, transparency
	// logs, timestamp authorities and CT logs that are believed. When it lists CT logs,
	// the certificate must carry an SCT from one.
	TrustedRoot []byte
}

// VerifyOCI checks the cosign signatures of an OCI chart: sigs is what
// chartfetch.FetchSignatures found, archiveDigest the digest of the archive that was
// fetched ("sha256:<hex>"). The manifest must hash to sigs.ManifestDigest and have
// the archive as its chart layer (else ReasonTampered); then the chart is accepted if
// any Sigstore bundle or legacy signature verifies for that manifest under p.
//
// A refusal is an *Error. With no signature at all it is ReasonUnsigned; when every
// signature fails, the most telling reason of theirs is reported (a signature valid
// for another manifest, then an expired certificate, another identity, another key,
// unreadable material), and the others are named in the message.
func VerifyOCI(archiveDigest string, sigs *chartfetch.Signatures, p CosignPolicy) (Identity, error) {
	check, err := p.compile()
	if err != nil {
		return Identity{}, err
	}
	if sigs == nil {
		return Identity{}, Refuse(ReasonInvalid, "no signature material was given")
	}
	if err := checkCosignManifest(archiveDigest, sigs); err != nil {
		return Identity{}, err
	}
	if len(sigs.Bundles) == 0 && len(sigs.Legacy) == 0 {
		return Identity{}, Refuse(ReasonUnsigned,
			"manifest %s has no cosign signature: no Sigstore bundle among its referrers and no sha256-<digest>.sig tag",
			sigs.ManifestDigest)
	}

	manifest := cosignArtifact{data: sigs.Manifest, digest: sigs.ManifestDigest}
	var failures []cosignFailure
	bundles, legacy := sigs.Bundles, sigs.Legacy
	if n := len(bundles) - chartfetch.MaxSignatureArtifacts; n > 0 {
		bundles = bundles[:chartfetch.MaxSignatureArtifacts]
		failures = append(failures, notExamined(n, "bundles"))
	}
	if n := len(legacy) - chartfetch.MaxSignatureArtifacts; n > 0 {
		legacy = legacy[:chartfetch.MaxSignatureArtifacts]
		failures = append(failures, notExamined(n, "sha256-<digest>.sig signatures"))
	}
	for i, raw := range bundles {
		id, err := check.verifyBundle(raw, manifest)
		if err == nil {
			id.Digest, id.ManifestDigest = archiveDigest, sigs.ManifestDigest
			return id, nil
		}
		failures = append(failures, cosignFailure{what: fmt.Sprintf("bundle %d", i+1), err: cosignRefusal(err)})
	}
	for i, l := range legacy {
		id, err := check.verifyLegacy(l, sigs.ManifestDigest)
		if err == nil {
			id.Digest, id.ManifestDigest = archiveDigest, sigs.ManifestDigest
			return id, nil
		}
		failures = append(failures, cosignFailure{what: fmt.Sprintf("sha256-<digest>.sig signature %d", i+1), err: cosignRefusal(err)})
	}
	return Identity{}, refuseCosign("manifest "+sigs.ManifestDigest, failures)
}

// notExamined is the failure of the signatures beyond the first
// chartfetch.MaxSignatureArtifacts, which VerifyOCI does not look at: whoever may push
// to the repository may attach any number, and each costs a verification.
func notExamined(n int, what string) cosignFailure {
	return cosignFailure{
		what: fmt.Sprintf("%d more %s", n, what),
		err:  &Error{Reason: ReasonInvalid, Err: fmt.Errorf("not examined: at most %d are", chartfetch.MaxSignatureArtifacts)},
	}
}

// VerifyBlobBundle checks a Sigstore bundle of a chart archive, what `cosign sign-blob
// --bundle` writes, for an archive imported without a registry. Refusals are as
// VerifyOCI's.
func VerifyBlobBundle(archive, bundleJSON []byte, p CosignPolicy) (Identity, error) {
	check, err := p.compile()
	if err != nil {
		return Identity{}, err
	}
	if len(bytes.TrimSpace(bundleJSON)) == 0 {
		return Identity{}, Refuse(ReasonUnsigned, "no Sigstore bundle was given for the archive")
	}
	archiveDigest := cosignDigestOf(archive)
	id, err := check.verifyBundle(bundleJSON, cosignArtifact{data: archive, digest: archiveDigest})
	if err != nil {
		return Identity{}, refuseCosign("archive "+archiveDigest, []cosignFailure{{what: "the bundle", err: cosignRefusal(err)}})
	}
	id.Digest = archiveDigest
	return id, nil
}

// cosignArtifact is what a signature must cover: the OCI manifest (its raw bytes, which
// a message signature is over) or the archive itself.
type cosignArtifact struct {
	data   []byte
	digest string // "sha256:<hex>" of data
}

// cosignCheck is a CosignPolicy made ready: its key or trusted root parsed once.
type cosignCheck struct {
	// With a key.
	keyVerifier    signature.Verifier
	keyFingerprint string
	// Keyless.
	keyless  *Keyless
	root     *root.TrustedRoot
	identity verify.CertificateIdentity
}

// compile checks that p asks for exactly one thing and that it can be read.
func (p CosignPolicy) compile() (*cosignCheck, error) {
	switch {
	case len(p.PublicKey) > 0 && p.Keyless != nil:
		return nil, Refuse(ReasonInvalid, "the cosign policy sets both a public key and keyless; set one")
	case len(p.PublicKey) > 0:
		return compileCosignKey(p.PublicKey)
	case p.Keyless != nil:
		return compileCosignKeyless(p.Keyless)
	}
	return nil, Refuse(ReasonInvalid, "the cosign policy sets neither a public key nor keyless; set one")
}

func compileCosignKey(pemKey []byte) (*cosignCheck, error) {
	pub, err := readCosignPublicKey(pemKey)
	if err != nil {
		return nil, Refuse(ReasonInvalid, "cannot read the cosign public key: %v", err)
	}
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return nil, Refuse(ReasonInvalid, "unsupported cosign public key: %v", err)
	}
	v, err := newCosignKeyVerifier(pub)
	if err != nil {
		return nil, Refuse(ReasonInvalid, "unsupported cosign public key: %v", err)
	}
	return &cosignCheck{keyVerifier: v, keyFingerprint: cosignDigestOf(der)}, nil
}

// readCosignPublicKey reads a PEM public key as cosign writes it (a
// SubjectPublicKeyInfo, or PKCS #1 for RSA). The key is a Secret's value, and a
// refusal is shown to whoever may read the definition: a PEM block's type is named
// only when it is a known one, and x509's errors quote no key bytes.
func readCosignPublicKey(pemKey []byte) (crypto.PublicKey, error) {
	block, _ := pem.Decode(pemKey)
	if block == nil {
		return nil, errors.New("not PEM: no -----BEGIN PUBLIC KEY----- block")
	}
	switch block.Type {
	case "PUBLIC KEY":
		return x509.ParsePKIXPublicKey(block.Bytes)
	case "RSA PUBLIC KEY":
		return x509.ParsePKCS1PublicKey(block.Bytes)
	case "CERTIFICATE":
		return nil, errors.New("a CERTIFICATE, not a PUBLIC KEY")
	case "PRIVATE KEY", "EC PRIVATE KEY", "RSA PRIVATE KEY", "ENCRYPTED PRIVATE KEY",
		"ENCRYPTED COSIGN PRIVATE KEY", "ENCRYPTED SIGSTORE PRIVATE KEY":
		return nil, fmt.Errorf("a %s, not the PUBLIC KEY (cosign.pub): a verifier needs no private key", block.Type)
	}
	return nil, errors.New("its PEM block is not a PUBLIC KEY")
}

const (
	// maxIdentityLength bounds a keyless issuer, subject and subject expression: an
	// OIDC issuer URL or a certificate SAN is far shorter.
	maxIdentityLength = 512
	// maxSubjectRegExpInsts bounds the compiled subject expression, compiled on every
	// verification: a few bytes of counted repetition (a{1000}) compile to thousands
	// of instructions, and an unbounded expression to hundreds of MiB.
	maxSubjectRegExpInsts = 10000
)

func compileCosignKeyless(k *Keyless) (*cosignCheck, error) {
	if k.Issuer == "" || (k.Subject == "" && k.SubjectRegExp == "") {
		return nil, Refuse(ReasonInvalid, "keyless verification needs a certificate issuer and a subject (or subject regular expression)")
	}
	for _, f := range []struct{ name, value string }{{"issuer", k.Issuer}, {"subject", k.Subject}, {"subjectRegExp", k.SubjectRegExp}} {
		if len(f.value) > maxIdentityLength {
			return nil, Refuse(ReasonInvalid, "keyless %s is %d bytes, more than the %d accepted", f.name, len(f.value), maxIdentityLength)
		}
	}
	if len(k.TrustedRoot) == 0 {
		return nil, Refuse(ReasonInvalid, "keyless verification needs a trusted root (trusted_root.json)")
	}
	re := ""
	if k.SubjectRegExp != "" {
		re = "^(?:" + k.SubjectRegExp + ")$"
		if err := checkSubjectRegExp(re); err != nil {
			return nil, Refuse(ReasonInvalid, "invalid subjectRegExp %q: %v", k.SubjectRegExp, err)
		}
	}
	tr, err := readTrustedRoot(k.TrustedRoot)
	if err != nil {
		return nil, Refuse(ReasonInvalid, "%v", err)
	}
	if len(tr.FulcioCertificateAuthorities()) == 0 {
		return nil, Refuse(ReasonInvalid, "the trusted root holds no certificate authority; keyless signatures cannot chain to it")
	}
	if len(tr.RekorLogs()) == 0 && len(tr.TimestampingAuthorities()) == 0 {
		return nil, Refuse(ReasonInvalid, "the trusted root holds neither a transparency log nor a timestamp authority; nothing could prove when a keyless signature was made")
	}
	san, err := verify.NewSANMatcher(k.Subject, re)
	if err != nil {
		return nil, Refuse(ReasonInvalid, "invalid subjectRegExp %q: %v", k.SubjectRegExp, err)
	}
	issuer, err := verify.NewIssuerMatcher(k.Issuer, "")
	if err != nil {
		return nil, Refuse(ReasonInvalid, "invalid issuer %q: %v", k.Issuer, err)
	}
	id, err := verify.NewCertificateIdentity(san, issuer, certificate.Extensions{})
	if err != nil {
		return nil, Refuse(ReasonInvalid, "invalid keyless identity: %v", err)
	}
	return &cosignCheck{keyless: k, root: tr, identity: id}, nil
}

// checkSubjectRegExp refuses an expression whose program is larger than
// maxSubjectRegExpInsts, before regexp.Compile builds it: the size regexp/syntax
// allows lets 21 KB of a{1000} take 865 MiB. Within maxIdentityLength bytes, parsing
// and compiling it here costs milliseconds.
func checkSubjectRegExp(re string) error {
	parsed, err := syntax.Parse(re, syntax.Perl) // regexp.Compile's flags
	if err != nil {
		return err
	}
	prog, err := syntax.Compile(parsed.Simplify())
	if err != nil {
		return err
	}
	if n := len(prog.Inst); n > maxSubjectRegExpInsts {
		return fmt.Errorf("it compiles to %d instructions, more than the %d accepted (spell out fewer counted repetitions)", n, maxSubjectRegExpInsts)
	}
	return nil
}

// readTrustedRoot reads a Sigstore trusted_root.json. It is a Secret's value, and
// the libraries' errors quote what they could not read (protojson the token it
// choked on, sigstore-go a media type or URI), so a refusal says what is wrong and
// where, never with the content.
func readTrustedRoot(raw []byte) (*root.TrustedRoot, error) {
	const notRoot = "the trusted root is not a Sigstore trusted_root.json"
	if err := json.Unmarshal(raw, new(json.RawMessage)); err != nil {
		var syntaxErr *json.SyntaxError
		if errors.As(err, &syntaxErr) {
			return nil, fmt.Errorf("%s: not JSON (syntax error at byte %d)", notRoot, syntaxErr.Offset)
		}
		return nil, fmt.Errorf("%s: not JSON", notRoot)
	}
	pb, err := root.NewTrustedRootProtobuf(raw)
	if err != nil {
		return nil, fmt.Errorf("%s: a field is unknown or holds a value of the wrong type%s", notRoot, protojsonPosition(err))
	}
	if pb.GetMediaType() != root.TrustedRootMediaType01 {
		return nil, fmt.Errorf("%s: its mediaType is not %q", notRoot, root.TrustedRootMediaType01)
	}
	tr, err := root.NewTrustedRootFromProtobuf(pb)
	if err != nil {
		what := "a certificate authority or timestamp authority"
		if strings.Contains(err.Error(), "tlog") {
			what = "a transparency log or CT log"
		}
		return nil, fmt.Errorf("the trusted root cannot be used: %s in it is incomplete, or its key or certificates cannot be read", what)
	}
	return tr, nil
}

// protojsonPosition is the " (line L:C)" a protojson error names, or "".
func protojsonPosition(err error) string {
	if m := protojsonLine.FindStringSubmatch(err.Error()); m != nil {
		return " (at line " + m[1] + ")"
	}
	return ""
}

var protojsonLine = regexp.MustCompile(`\(line (\d+:\d+)\)`)

// verifyBundle verifies a Sigstore bundle (a DSSE in-toto statement naming art, or a
// message signature over it) and, when it fails, says why in a Reason.
func (c *cosignCheck) verifyBundle(raw []byte, art cosignArtifact) (Identity, error) {
	var b bundle.Bundle
	if err := b.UnmarshalJSON(raw); err != nil {
		if bytes.Contains(raw, []byte(`"base64Signature"`)) {
			return Identity{}, Refuse(ReasonInvalid, "a cosign v2 bundle, not a Sigstore bundle (sign with --new-bundle-format)")
		}
		return Identity{}, Refuse(ReasonInvalid, "not a Sigstore bundle: %v", err)
	}
	return c.verifyEntity(&b, art)
}

// cosignSignPredicate is the predicate type of the in-toto statement `cosign sign`
// signs since cosign v3. `cosign attest` attaches attestations (an SBOM, a
// vulnerability scan, build provenance) the same way, by the same key or identity,
// with other predicate types: those say something about the artifact, they do not
// sign it.
const cosignSignPredicate = "https://sigstore.dev/cosign/sign/v1"

// verifyEntity runs sigstore-go's verification of e for art under the policy.
func (c *cosignCheck) verifyEntity(e verify.SignedEntity, art cosignArtifact) (Identity, error) {
	res, err := c.run(e, verify.WithArtifact(bytes.NewReader(art.data)))
	if err != nil {
		return Identity{}, c.diagnose(e, art, err)
	}
	if err := checkSignedStatement(e, res); err != nil {
		return Identity{}, err
	}
	return c.identityOf(res), nil
}

// checkSignedStatement refuses a verified DSSE envelope whose in-toto statement is
// not a cosign signature. A message signature (cosign sign-blob, a legacy
// signature) has no statement and is a signature.
func checkSignedStatement(e verify.SignedEntity, res *verify.VerificationResult) error {
	sc, err := e.SignatureContent()
	if err != nil {
		return Refuse(ReasonInvalid, "unreadable signature: %v", err)
	}
	if sc.EnvelopeContent() == nil {
		return nil
	}
	if res.Statement == nil {
		return Refuse(ReasonInvalid, "its DSSE envelope holds no in-toto statement")
	}
	if pt := res.Statement.GetPredicateType(); pt != cosignSignPredicate {
		return Refuse(ReasonUnsigned, "an attestation (in-toto predicate type %.100q), not a cosign signature (predicate type %q)", pt, cosignSignPredicate)
	}
	return nil
}

// run verifies e with the verifier options the policy and e call for, and the
// policy's key or identity requirement.
func (c *cosignCheck) run(e verify.SignedEntity, artifact verify.ArtifactPolicyOption) (*verify.VerificationResult, error) {
	if c.keyless == nil {
		// A key proves who signed; nothing needs to prove when. The trusted material
		// answers every key hint with the policy's key, so a bundle cannot choose it.
		material := root.NewTrustedPublicKeyMaterial(func(string) (root.TimeConstrainedVerifier, error) {
			return root.NewExpiringKey(c.keyVerifier, time.Time{}, time.Time{}), nil
		})
		v, err := verify.NewVerifier(material, verify.WithNoObserverTimestamps(), verify.WithoutStatementPredicate())
		if err != nil {
			return nil, err
		}
		return v.Verify(e, verify.NewPolicy(artifact, verify.WithKey()))
	}
	opts := []verify.VerifierOption{verify.WithObserverTimestamps(1), verify.WithoutStatementPredicate()}
	if entries, _ := e.TlogEntries(); len(entries) > 0 && len(c.root.RekorLogs()) > 0 {
		// Log entries there are must be the trusted logs'; their signed entry
		// timestamps then count as observer timestamps.
		opts = append(opts, verify.WithTransparencyLog(1))
	}
	if len(c.root.CTLogs()) > 0 {
		opts = append(opts, verify.WithSignedCertificateTimestamps(1))
	}
	v, err := verify.NewVerifier(c.root, opts...)
	if err != nil {
		return nil, err
	}
	return v.Verify(e, verify.NewPolicy(artifact, verify.WithCertificateIdentity(c.identity)))
}

// identityOf reads what a successful verification proved.
func (c *cosignCheck) identityOf(res *verify.VerificationResult) Identity {
	id := Identity{Method: MethodCosignKey, KeyFingerprint: c.keyFingerprint}
	if c.keyless != nil {
		id = Identity{Method: MethodCosignKeyless}
		if res.Signature != nil && res.Signature.Certificate != nil {
			id.Subject = res.Signature.Certificate.SubjectAlternativeName
			id.Issuer = res.Signature.Certificate.Issuer
		}
	}
	for _, ts := range res.VerifiedTimestamps {
		if id.SignedAt.IsZero() || ts.Timestamp.Before(id.SignedAt) {
			id.SignedAt = ts.Timestamp.UTC()
		}
	}
	return id
}

// diagnose finds the Reason a signature failed sigstore-go's verification (failed). It
// only ever explains a refusal; what is accepted is sigstore-go's decision alone.
func (c *cosignCheck) diagnose(e verify.SignedEntity, art cosignArtifact, failed error) error {
	vc, err := e.VerificationContent()
	if err != nil {
		return Refuse(ReasonInvalid, "unreadable verification material: %v", err)
	}
	sc, err := e.SignatureContent()
	if err != nil {
		return Refuse(ReasonInvalid, "unreadable signature: %v", err)
	}
	if c.keyless == nil {
		if vc.Certificate() != nil {
			return Refuse(ReasonWrongKey, "signed keyless with a certificate, not with the public key %s", c.keyFingerprint)
		}
		if err := c.signedOther(e, sc, art, "signed with the key"); err != nil {
			return err
		}
		return Refuse(ReasonWrongKey, "does not verify with the public key %s: %v", c.keyFingerprint, failed)
	}

	leaf := vc.Certificate()
	if leaf == nil {
		return Refuse(ReasonWrongIdentity, "signed with a key, not keyless with a certificate")
	}
	if _, err := verify.VerifyLeafCertificate(leaf.NotBefore, cosignWithoutSANCritical(leaf), c.root); err != nil {
		return Refuse(ReasonWrongIdentity, "its certificate (%s) does not chain to a certificate authority of the trusted root",
			cosignCertIssuer(leaf))
	}
	if summary, err := certificate.SummarizeCertificate(leaf); err == nil {
		if err := c.identity.Verify(summary); err != nil {
			return Refuse(ReasonWrongIdentity, "its certificate names issuer %q and subject %q, not issuer %q and %s",
				summary.Issuer, summary.SubjectAlternativeName, c.keyless.Issuer, c.wantSubject())
		}
	}
	times := cosignClaimedTimes(e)
	if len(times) == 0 {
		return Refuse(ReasonInvalid, "no transparency log entry or RFC 3161 timestamp says when it was made, which a keyless signature needs")
	}
	for _, t := range times {
		if t.Before(leaf.NotBefore) || t.After(leaf.NotAfter) {
			return Refuse(ReasonExpired, "its certificate was valid from %s to %s, but the signature is timestamped %s",
				leaf.NotBefore.UTC().Format(time.RFC3339), leaf.NotAfter.UTC().Format(time.RFC3339), t.UTC().Format(time.RFC3339))
		}
	}
	if err := c.signedOther(e, sc, art, "signed by the identity"); err != nil {
		return err
	}
	if err := verify.VerifySignatureWithArtifacts(sc, vc, c.root, []io.Reader{bytes.NewReader(art.data)}); err != nil {
		return Refuse(ReasonTampered, "the signature does not verify over %s with its certificate's key: %v", art.digest, err)
	}
	return Refuse(ReasonWrongIdentity, "not vouched for by the trusted root (timestamp, transparency log or certificate transparency): %v", failed)
}

// signedOther explains a signature that is genuine under the policy but not one of
// art: a signature of something else (ReasonTampered), or an attestation
// (ReasonUnsigned). It is nil when the signature is not genuine. The signature is
// verified once, without art, before anything it claims is read: an unverified
// statement can name any number of subjects, and trying each would cost a
// verification apiece.
func (c *cosignCheck) signedOther(e verify.SignedEntity, sc verify.SignatureContent, art cosignArtifact, signed string) error {
	if m := sc.MessageSignatureContent(); m != nil {
		if m.DigestAlgorithm() != protocommon.HashAlgorithm_SHA2_256.String() {
			return nil
		}
		other := "sha256:" + hex.EncodeToString(m.Digest())
		if other == art.digest {
			return nil
		}
		if _, err := c.run(e, verify.WithArtifactDigest("sha256", m.Digest())); err != nil {
			return nil
		}
		return Refuse(ReasonTampered, "%s, but for %s, not %s", signed, other, art.digest)
	}
	if sc.EnvelopeContent() == nil {
		return nil
	}
	res, err := c.run(e, verify.WithoutArtifactUnsafe())
	if err != nil {
		return nil
	}
	if err := checkSignedStatement(e, res); err != nil {
		return err
	}
	var other string
	for _, s := range res.Statement.GetSubject() {
		d := s.GetDigest()["sha256"]
		if d == "" {
			continue
		}
		d = "sha256:" + strings.ToLower(d)
		if d == art.digest {
			return nil // it names art: it failed for another reason
		}
		if other == "" && isCosignDigest(d) {
			other = d
		}
	}
	if other == "" {
		return nil
	}
	return Refuse(ReasonTampered, "%s, but for %s, not %s", signed, other, art.digest)
}

func (c *cosignCheck) wantSubject() string {
	if c.keyless.Subject != "" {
		return fmt.Sprintf("subject %q", c.keyless.Subject)
	}
	return fmt.Sprintf("a subject matching %q", c.keyless.SubjectRegExp)
}

// cosignClaimedTimes are the times a signature's timestamps and log entries state, unverified.
func cosignClaimedTimes(e verify.SignedEntity) []time.Time {
	var out []time.Time
	if tsrs, err := e.Timestamps(); err == nil {
		for _, raw := range tsrs {
			if ts, err := timestamp.ParseResponse(raw); err == nil {
				out = append(out, ts.Time)
			}
		}
	}
	if entries, err := e.TlogEntries(); err == nil {
		for _, entry := range entries {
			if t := entry.IntegratedTime(); !t.IsZero() {
				out = append(out, t)
			}
		}
	}
	return out
}

// cosignWithoutSANCritical drops a critical SAN extension from the unhandled ones, as
// sigstore-go does: Fulcio marks an OtherName SAN critical, which Go cannot parse.
func cosignWithoutSANCritical(cert *x509.Certificate) *x509.Certificate {
	if !slices.ContainsFunc(cert.UnhandledCriticalExtensions, cryptoutils.SANOID.Equal) {
		return cert
	}
	c := *cert
	c.UnhandledCriticalExtensions = slices.DeleteFunc(slices.Clone(c.UnhandledCriticalExtensions), cryptoutils.SANOID.Equal)
	return &c
}

func cosignCertIssuer(cert *x509.Certificate) string {
	return fmt.Sprintf("issued by %q", cert.Issuer.String())
}

// verifyLegacy verifies one layer of a cosign sha256-<hex>.sig manifest: a signature
// over a simplesigning payload that must name manifestDigest.
func (c *cosignCheck) verifyLegacy(l chartfetch.LegacySignature, manifestDigest string) (Identity, error) {
	sig, err := base64.StdEncoding.DecodeString(strings.TrimSpace(l.Signature))
	if err != nil || len(sig) == 0 {
		return Identity{}, Refuse(ReasonInvalid, "its signature annotation is not base64")
	}
	var id Identity
	if c.keyless == nil {
		if err := c.keyVerifier.VerifySignature(bytes.NewReader(sig), bytes.NewReader(l.Payload)); err != nil {
			if len(l.Certificate) > 0 {
				return Identity{}, Refuse(ReasonWrongKey, "signed keyless with a certificate, not with the public key %s", c.keyFingerprint)
			}
			return Identity{}, Refuse(ReasonWrongKey, "does not verify with the public key %s", c.keyFingerprint)
		}
		id = Identity{Method: MethodCosignKey, KeyFingerprint: c.keyFingerprint}
	} else {
		entity, err := cosignLegacyKeylessEntity(l, sig)
		if err != nil {
			return Identity{}, err
		}
		id, err = c.verifyEntity(entity, cosignArtifact{data: l.Payload, digest: cosignDigestOf(l.Payload)})
		if err != nil {
			return Identity{}, err
		}
	}
	named, err := cosignPayloadDigest(l.Payload)
	if err != nil {
		return Identity{}, err
	}
	if named != manifestDigest {
		return Identity{}, Refuse(ReasonTampered, "a valid signature, but of manifest %s, not %s", named, manifestDigest)
	}
	return id, nil
}

// cosignPayloadDigest returns the manifest digest a cosign simplesigning payload names.
func cosignPayloadDigest(raw []byte) (string, error) {
	var p payload.SimpleContainerImage
	if err := json.Unmarshal(raw, &p); err != nil {
		return "", Refuse(ReasonInvalid, "its payload is not simplesigning JSON: %v", err)
	}
	if p.Critical.Type != payload.CosignSignatureType {
		return "", Refuse(ReasonInvalid, "its payload has type %q, not %q", p.Critical.Type, payload.CosignSignatureType)
	}
	return p.Critical.Image.DockerManifestDigest, nil
}

// cosignLegacyKeylessEntity presents a keyless legacy signature to sigstore-go: a message
// signature over the payload, its certificate, and the transparency log entry its
// Rekor bundle vouches for.
func cosignLegacyKeylessEntity(l chartfetch.LegacySignature, sig []byte) (verify.SignedEntity, error) {
	if len(l.Certificate) == 0 {
		return nil, Refuse(ReasonWrongIdentity, "signed with a key, not keyless with a certificate")
	}
	block, _ := pem.Decode(l.Certificate)
	if block == nil {
		return nil, Refuse(ReasonInvalid, "its certificate annotation is not PEM")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, Refuse(ReasonInvalid, "cannot read its certificate: %v", err)
	}
	e := &cosignLegacyEntity{
		cert: cert,
		sig:  bundle.NewMessageSignature(cosignSum(l.Payload), protocommon.HashAlgorithm_SHA2_256.String(), sig),
	}
	if len(l.RekorBundle) > 0 {
		entry, err := parseCosignRekorBundle(l.RekorBundle)
		if err != nil {
			return nil, Refuse(ReasonInvalid, "cannot read its Rekor bundle: %v", err)
		}
		e.entries = []*tlog.Entry{entry}
	}
	return e, nil
}

// cosignRekorBundle is cosign's dev.sigstore.cosign/bundle annotation: a Rekor entry and the
// log's signed entry timestamp over it.
type cosignRekorBundle struct {
	SignedEntryTimestamp []byte `json:"SignedEntryTimestamp"`
	Payload              struct {
		Body           []byte `json:"body"`
		IntegratedTime int64  `json:"integratedTime"`
		LogIndex       int64  `json:"logIndex"`
		LogID          string `json:"logID"`
	} `json:"Payload"`
}

func parseCosignRekorBundle(raw []byte) (*tlog.Entry, error) {
	var rb cosignRekorBundle
	if err := json.Unmarshal(raw, &rb); err != nil {
		return nil, err
	}
	logID, err := hex.DecodeString(rb.Payload.LogID)
	if err != nil {
		return nil, fmt.Errorf("log ID: %w", err)
	}
	var kind struct {
		Kind       string `json:"kind"`
		APIVersion string `json:"apiVersion"`
	}
	if err := json.Unmarshal(rb.Payload.Body, &kind); err != nil {
		return nil, fmt.Errorf("entry body: %w", err)
	}
	return tlog.ParseTransparencyLogEntry(&protorekor.TransparencyLogEntry{
		LogIndex:          rb.Payload.LogIndex,
		LogId:             &protocommon.LogId{KeyId: logID},
		KindVersion:       &protorekor.KindVersion{Kind: kind.Kind, Version: kind.APIVersion},
		IntegratedTime:    rb.Payload.IntegratedTime,
		InclusionPromise:  &protorekor.InclusionPromise{SignedEntryTimestamp: rb.SignedEntryTimestamp},
		CanonicalizedBody: rb.Payload.Body,
	})
}

// cosignLegacyEntity is a keyless legacy signature as a verify.SignedEntity.
type cosignLegacyEntity struct {
	cert    *x509.Certificate
	sig     *bundle.MessageSignature
	entries []*tlog.Entry
}

func (e *cosignLegacyEntity) HasInclusionPromise() bool { return len(e.entries) > 0 }
func (e *cosignLegacyEntity) HasInclusionProof() bool   { return false }
func (e *cosignLegacyEntity) VerificationContent() (verify.VerificationContent, error) {
	return bundle.NewCertificate(e.cert), nil
}
func (e *cosignLegacyEntity) SignatureContent() (verify.SignatureContent, error) { return e.sig, nil }
func (e *cosignLegacyEntity) Timestamps() ([][]byte, error)                      { return nil, nil }
func (e *cosignLegacyEntity) TlogEntries() ([]*tlog.Entry, error)                { return e.entries, nil }

// Version is the oldest bundle version's: legacy signatures predate bundles, and
// sigstore-go then accepts the hash algorithms cosign used to pair with a key.
func (e *cosignLegacyEntity) Version() (string, error) { return "v0.1", nil }

// checkCosignManifest checks that the manifest is the one the registry named and that its
// chart layer is the archive that was fetched: a signature of the manifest then covers
// the archive.
func checkCosignManifest(archiveDigest string, sigs *chartfetch.Signatures) error {
	if !isCosignDigest(archiveDigest) {
		return Refuse(ReasonInvalid, "archive digest %q is not sha256:<hex>", archiveDigest)
	}
	if !isCosignDigest(sigs.ManifestDigest) {
		return Refuse(ReasonInvalid, "manifest digest %q is not sha256:<hex>", sigs.ManifestDigest)
	}
	if got := cosignDigestOf(sigs.Manifest); got != sigs.ManifestDigest {
		return Refuse(ReasonTampered, "the manifest fetched hashes to %s, not %s", got, sigs.ManifestDigest)
	}
	var m ocispec.Manifest
	if err := json.Unmarshal(sigs.Manifest, &m); err != nil {
		return Refuse(ReasonTampered, "manifest %s is not an OCI manifest: %v", sigs.ManifestDigest, err)
	}
	var charts []string
	for _, l := range m.Layers {
		if l.MediaType == cosignChartLayerType {
			charts = append(charts, l.Digest.String())
		}
	}
	switch {
	case len(charts) != 1:
		return Refuse(ReasonTampered, "manifest %s has %d chart layers, not one", sigs.ManifestDigest, len(charts))
	case charts[0] != archiveDigest:
		return Refuse(ReasonTampered, "manifest %s holds chart archive %s, not the %s fetched", sigs.ManifestDigest, charts[0], archiveDigest)
	}
	return nil
}

const cosignChartLayerType = "application/vnd.cncf.helm.chart.content.v1.tar+gzip"

// cosignFailure is one signature's refusal.
type cosignFailure struct {
	what string
	err  *Error
}

// cosignSpecificity orders reasons by how far a signature got before it failed: a valid
// signature of other bytes says most about what happened, unreadable material least.
var cosignSpecificity = map[Reason]int{
	ReasonTampered:      5,
	ReasonExpired:       4,
	ReasonWrongIdentity: 3,
	ReasonWrongKey:      2,
	ReasonInvalid:       1,
	ReasonUnsigned:      0, // an attestation: no signature at all
}

// refuseCosign reports the most specific of failures, naming the others.
func refuseCosign(subject string, failures []cosignFailure) error {
	slices.SortStableFunc(failures, func(a, b cosignFailure) int {
		return cosignSpecificity[b.err.Reason] - cosignSpecificity[a.err.Reason]
	})
	first := failures[0]
	msg := fmt.Sprintf("no cosign signature of %s verifies: %s: %v", subject, first.what, first.err.Err)
	if len(failures) > 1 {
		var others []string
		for _, f := range failures[1:] {
			others = append(others, fmt.Sprintf("%s: %s: %v", f.what, f.err.Reason, f.err.Err))
		}
		msg += "; also " + strings.Join(others, "; ")
	}
	return &Error{Reason: first.err.Reason, Err: errors.New(msg)}
}

// cosignRefusal makes any error a refusal; one without a Reason is unreadable material.
func cosignRefusal(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return &Error{Reason: ReasonInvalid, Err: err}
}

// cosignKeyVerifier verifies with a public key under its default hash and, failing that,
// SHA-256: cosign signs with SHA-256 whatever the curve, other tools with the curve's
// own hash.
type cosignKeyVerifier struct {
	verifiers []signature.Verifier
}

func newCosignKeyVerifier(pub crypto.PublicKey) (*cosignKeyVerifier, error) {
	def, err := signature.LoadDefaultVerifier(pub)
	if err != nil {
		return nil, err
	}
	kv := &cosignKeyVerifier{verifiers: []signature.Verifier{def}}
	if sha, err := signature.LoadVerifier(pub, crypto.SHA256); err == nil {
		kv.verifiers = append(kv.verifiers, sha)
	}
	return kv, nil
}

func (k *cosignKeyVerifier) PublicKey(opts ...signature.PublicKeyOption) (crypto.PublicKey, error) {
	return k.verifiers[0].PublicKey(opts...)
}

func (k *cosignKeyVerifier) VerifySignature(sig, message io.Reader, opts ...signature.VerifyOption) error {
	rawSig, err := io.ReadAll(sig)
	if err != nil {
		return err
	}
	var rawMsg []byte
	if message != nil {
		if rawMsg, err = io.ReadAll(message); err != nil {
			return err
		}
	}
	var errs []error
	for _, v := range k.verifiers {
		var msg io.Reader
		if message != nil {
			msg = bytes.NewReader(rawMsg)
		}
		err := v.VerifySignature(bytes.NewReader(rawSig), msg, opts...)
		if err == nil {
			return nil
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func isCosignDigest(d string) bool {
	hexPart, ok := strings.CutPrefix(d, "sha256:")
	if !ok || len(hexPart) != sha256.Size*2 {
		return false
	}
	_, err := hex.DecodeString(hexPart)
	return err == nil && strings.ToLower(hexPart) == hexPart
}

func cosignSum(b []byte) []byte {
	sum := sha256.Sum256(b)
	return sum[:]
}

func cosignDigestOf(b []byte) string { return "sha256:" + hex.EncodeToString(cosignSum(b)) }
