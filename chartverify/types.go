package chartverify

import (
	"errors"
	"fmt"
	"time"
)

// Method names how a chart's signature was checked.
type Method string

const (
	// MethodProvenance is a Helm .prov file checked against an OpenPGP keyring.
	MethodProvenance Method = "Provenance"
	// MethodCosignKey is a cosign signature checked against a public key.
	MethodCosignKey Method = "CosignKey"
	// MethodCosignKeyless is a cosign signature whose certificate chains to a trusted
	// root and names the expected issuer and subject.
	MethodCosignKeyless Method = "CosignKeyless"
)

// Identity is what a successful verification proved: who signed which bytes.
type Identity struct {
	Method Method
	// Digest is "sha256:<hex>" of the chart archive (.tgz) the signature covers.
	Digest string
	// ManifestDigest is the OCI manifest's digest a cosign signature of an OCI chart
	// names; empty otherwise. The manifest's chart layer is Digest.
	ManifestDigest string
	// KeyFingerprint is the signing key's fingerprint: the OpenPGP key's (upper-case
	// hex) for a .prov, "sha256:<hex>" of the public key's DER (SubjectPublicKeyInfo) for
	// cosign with a key.
	KeyFingerprint string
	// Signer is the OpenPGP identity (name <email>) of a .prov's key.
	Signer string
	// Subject and Issuer are a keyless signature's certificate identity (the SAN and the
	// OIDC issuer extension).
	Subject string
	Issuer  string
	// SignedAt is when the signature was made, as far as the scheme proves it (the
	// OpenPGP signature's creation time; the bundle's verified timestamp). Zero when
	// the scheme proves nothing about time.
	SignedAt time.Time
}

// Reason says why a chart was refused; it is the condition reason and event reason the
// definition shows.
type Reason string

const (
	// ReasonUnsigned: no signature was found where the scheme puts it.
	ReasonUnsigned Reason = "ChartUnsigned"
	// ReasonTampered: a signature was found and checks, but over other bytes than the
	// archive (or manifest) fetched.
	ReasonTampered Reason = "ChartTampered"
	// ReasonWrongKey: the signature was made by a key the keyring or public key does not
	// hold, or does not verify with it.
	ReasonWrongKey Reason = "ChartSignedByUnknownKey"
	// ReasonWrongIdentity: a keyless signature's certificate names another issuer or
	// subject, or does not chain to the trusted root.
	ReasonWrongIdentity Reason = "ChartSignedByUnexpectedIdentity"
	// ReasonExpired: the key or certificate had expired (or was revoked) when the
	// signature was made or the signature itself has expired.
	ReasonExpired Reason = "ChartSignatureExpired"
	// ReasonInvalid: what was given cannot be read: a malformed .prov, bundle, keyring,
	// public key or trusted root, or a verification declared without what it needs.
	ReasonInvalid Reason = "ChartVerificationInvalid"
	// ReasonUnavailable: the signature or key could not be fetched (network, registry,
	// credentials). Retried like a chart fetch; never treated as unsigned.
	ReasonUnavailable Reason = "ChartSignatureUnavailable"
)

// Error is a refusal: the Reason and what was found.
type Error struct {
	Reason Reason
	Err    error
}

func (e *Error) Error() string { return fmt.Sprintf("%s: %v", e.Reason, e.Err) }
func (e *Error) Unwrap() error { return e.Err }

// Refuse builds an *Error.
func Refuse(reason Reason, format string, args ...any) error {
	return &Error{Reason: reason, Err: fmt.Errorf(format, args...)}
}

// ReasonOf is the Reason of err's *Error, or ReasonInvalid when err carries none.
func ReasonOf(err error) Reason {
	var e *Error
	if errors.As(err, &e) {
		return e.Reason
	}
	return ReasonInvalid
}
