package app

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/pflag"

	"github.com/compositor-dev/compositor/chartverify"
)

// SignatureOptions say how `compositor import` and `compositor lint` check a chart
// archive's signature, offline, with the flags helm and cosign use for the same.
type SignatureOptions struct {
	// Prov is the archive's Helm provenance file (default ARCHIVE.prov when it exists).
	Prov string
	// Bundle is the archive's Sigstore bundle (cosign sign-blob --bundle).
	Bundle string
	// Keyring is an OpenPGP public keyring a .prov is checked against.
	Keyring string
	// Key is a PEM public key a bundle is checked against.
	Key string
	// CertificateIdentity, CertificateIdentityRegexp and CertificateOIDCIssuer are the
	// identity a keyless bundle's certificate must name; TrustedRoot is the Sigstore
	// trusted_root.json it must chain to.
	CertificateIdentity       string
	CertificateIdentityRegexp string
	CertificateOIDCIssuer     string
	TrustedRoot               string
}

// AddFlags registers the signature flags.
func (o *SignatureOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Prov, "prov", o.Prov, "Helm provenance file of the archive (default ARCHIVE.prov when it exists)")
	fs.StringVar(&o.Bundle, "bundle", o.Bundle, "Sigstore bundle of the archive (cosign sign-blob --bundle)")
	fs.StringVar(&o.Keyring, "keyring", o.Keyring, "OpenPGP public keyring to check --prov against")
	fs.StringVar(&o.Key, "key", o.Key, "PEM public key to check --bundle against")
	fs.StringVar(&o.CertificateIdentity, "certificate-identity", o.CertificateIdentity, "Keyless: the subject the bundle's certificate must name")
	fs.StringVar(&o.CertificateIdentityRegexp, "certificate-identity-regexp", o.CertificateIdentityRegexp, "Keyless: a regular expression the certificate's whole subject must match")
	fs.StringVar(&o.CertificateOIDCIssuer, "certificate-oidc-issuer", o.CertificateOIDCIssuer, "Keyless: the OIDC issuer the bundle's certificate must name")
	fs.StringVar(&o.TrustedRoot, "trusted-root", o.TrustedRoot, "Keyless: the Sigstore trusted_root.json the certificate must chain to")
}

// maxSignatureFileBytes bounds the signature and key files read.
const maxSignatureFileBytes = 1 << 20

// material reads the signature files for archivePath: --prov (or ARCHIVE.prov beside
// it) and --bundle.
func (o *SignatureOptions) material(archivePath string) (prov, bundle []byte, err error) {
	if o.Prov != "" && o.Bundle != "" {
		return nil, nil, usageErrorf("--prov and --bundle are two kinds of signature: give one")
	}
	provPath := o.Prov
	if provPath == "" && o.Bundle == "" {
		if _, statErr := os.Stat(archivePath + ".prov"); statErr == nil {
			provPath = archivePath + ".prov"
		}
	}
	if provPath != "" {
		if prov, err = readSmallFile("--prov", provPath); err != nil {
			return nil, nil, err
		}
	}
	if o.Bundle != "" {
		if bundle, err = readSmallFile("--bundle", o.Bundle); err != nil {
			return nil, nil, err
		}
	}
	return prov, bundle, nil
}

// hasKeys reports whether a key to check a signature with was given.
func (o *SignatureOptions) hasKeys() bool {
	return o.Keyring != "" || o.Key != "" || o.TrustedRoot != "" || o.CertificateIdentity != "" ||
		o.CertificateIdentityRegexp != "" || o.CertificateOIDCIssuer != ""
}

// verify checks archive's signature (prov or bundle) with the keys given. It is a
// usage error to give keys of one kind of signature for the other.
func (o *SignatureOptions) verify(archive, prov, bundle []byte) (chartverify.Identity, error) {
	switch {
	case len(prov) > 0:
		if o.Keyring == "" {
			return chartverify.Identity{}, usageErrorf("a .prov is checked with --keyring")
		}
		if o.Key != "" || o.TrustedRoot != "" {
			return chartverify.Identity{}, usageErrorf("--key and --trusted-root check a --bundle, not a .prov")
		}
		keyring, err := readSmallFile("--keyring", o.Keyring)
		if err != nil {
			return chartverify.Identity{}, err
		}
		return chartverify.VerifyProvenance(archive, prov, keyring)
	case len(bundle) > 0:
		if o.Keyring != "" {
			return chartverify.Identity{}, usageErrorf("--keyring checks a .prov, not a --bundle")
		}
		policy, err := o.cosignPolicy()
		if err != nil {
			return chartverify.Identity{}, err
		}
		return chartverify.VerifyBlobBundle(archive, bundle, policy)
	default:
		return chartverify.Identity{}, chartverify.Refuse(chartverify.ReasonUnsigned, "no signature: no --prov, no ARCHIVE.prov beside the archive and no --bundle")
	}
}

func (o *SignatureOptions) cosignPolicy() (chartverify.CosignPolicy, error) {
	keyless := o.TrustedRoot != "" || o.CertificateIdentity != "" || o.CertificateIdentityRegexp != "" || o.CertificateOIDCIssuer != ""
	switch {
	case o.Key != "" && keyless:
		return chartverify.CosignPolicy{}, usageErrorf("--key and the keyless flags (--certificate-*, --trusted-root) exclude each other")
	case o.Key != "":
		key, err := readSmallFile("--key", o.Key)
		return chartverify.CosignPolicy{PublicKey: key}, err
	case !keyless:
		return chartverify.CosignPolicy{}, usageErrorf("a --bundle is checked with --key, or keyless with --certificate-oidc-issuer, --certificate-identity (or -regexp) and --trusted-root")
	}
	var missing []string
	if o.TrustedRoot == "" {
		missing = append(missing, "--trusted-root")
	}
	if o.CertificateOIDCIssuer == "" {
		missing = append(missing, "--certificate-oidc-issuer")
	}
	if (o.CertificateIdentity == "") == (o.CertificateIdentityRegexp == "") {
		missing = append(missing, "exactly one of --certificate-identity and --certificate-identity-regexp")
	}
	if len(missing) > 0 {
		return chartverify.CosignPolicy{}, usageErrorf("keyless verification needs %s", strings.Join(missing, ", "))
	}
	root, err := readSmallFile("--trusted-root", o.TrustedRoot)
	if err != nil {
		return chartverify.CosignPolicy{}, err
	}
	return chartverify.CosignPolicy{Keyless: &chartverify.Keyless{
		Issuer: o.CertificateOIDCIssuer, Subject: o.CertificateIdentity, SubjectRegExp: o.CertificateIdentityRegexp, TrustedRoot: root,
	}}, nil
}

// describeIdentity is one line saying what a verification proved.
func describeIdentity(id chartverify.Identity) string {
	var who []string
	for _, kv := range [][2]string{{"signer", id.Signer}, {"key", id.KeyFingerprint}, {"subject", id.Subject}, {"issuer", id.Issuer}} {
		if kv[1] != "" {
			who = append(who, kv[0]+" "+kv[1])
		}
	}
	s := fmt.Sprintf("%s signature of %s verified: %s", id.Method, id.Digest, strings.Join(who, ", "))
	if !id.SignedAt.IsZero() {
		s += ", signed " + id.SignedAt.UTC().Format("2006-01-02T15:04:05Z")
	}
	return s
}

func readSmallFile(flag, path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", flag, err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxSignatureFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", flag, err)
	}
	if len(data) > maxSignatureFileBytes {
		return nil, fmt.Errorf("%s: %s is over %d bytes", flag, path, maxSignatureFileBytes)
	}
	return data, nil
}
