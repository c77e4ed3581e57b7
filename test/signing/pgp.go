// Package signing makes real signing keys and signatures for tests, so that chart
// verification is tested against the material it meets in the wild: OpenPGP keys and
// the Helm provenance files (.prov) they sign, byte for byte what `helm package --sign`
// writes (pgp.go), and cosign's (cosign.go).
package signing

import (
	"bytes"
	"crypto"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/ProtonMail/go-crypto/openpgp/armor"
	"github.com/ProtonMail/go-crypto/openpgp/clearsign"
	"github.com/ProtonMail/go-crypto/openpgp/packet"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/provenance"
	"sigs.k8s.io/yaml"
)

// PGPKeyOptions shapes a generated key. The zero value is a key made now that never
// expires and signs with its primary key.
type PGPKeyOptions struct {
	// Comment goes between name and email in the identity: "Name (Comment) <email>".
	Comment string
	// Created is the key's creation time (and its self-signatures'); zero means now.
	// A key made in the past can be expired by now, or older than a backdated signature.
	Created time.Time
	// Lifetime is how long after Created the key expires; zero means never.
	Lifetime time.Duration
	// SigningSubkey adds a signing subkey and signs with it instead of the primary key,
	// as keys kept by GnuPG with an offline primary do. Helm itself always signs with
	// the primary key.
	SigningSubkey bool
}

// SignOptions shapes a signature. The zero value is what Helm makes: a signature made
// now that never expires, over <name>-<version>.tgz.
type SignOptions struct {
	// Time is the signature's creation time; zero means now.
	Time time.Time
	// Lifetime is how long after Time the signature expires; zero means never.
	Lifetime time.Duration
	// FileName is the files: entry the archive's digest is listed under; empty means
	// <name>-<version>.tgz from the archive's Chart.yaml, as `helm package` names it.
	FileName string
}

// PGPKey is a generated OpenPGP key pair.
type PGPKey struct {
	entity *openpgp.Entity
	// signer is the private key that signs: the primary key or its signing subkey.
	signer *packet.PrivateKey
	// public and armored are the public keyring, serialized whenever the key changes
	// so that the accessors cannot fail.
	public, armored []byte
}

// NewPGPKey generates an ed25519 key pair (fast, unlike RSA) with the identity
// "name (opts.Comment) <email>".
func NewPGPKey(name, email string, opts PGPKeyOptions) (*PGPKey, error) {
	created := opts.Created
	if created.IsZero() {
		created = time.Now()
	}
	if opts.Lifetime < 0 || opts.Lifetime/time.Second > 1<<32-1 {
		return nil, fmt.Errorf("key lifetime %s out of range", opts.Lifetime)
	}
	cfg := &packet.Config{
		Algorithm:       packet.PubKeyAlgoEdDSA,
		DefaultHash:     crypto.SHA512,
		Time:            func() time.Time { return created },
		KeyLifetimeSecs: uint32(opts.Lifetime / time.Second),
	}
	e, err := openpgp.NewEntity(name, opts.Comment, email, cfg)
	if err != nil {
		return nil, fmt.Errorf("generate key for %s <%s>: %w", name, email, err)
	}
	k := &PGPKey{entity: e, signer: e.PrivateKey}
	if opts.SigningSubkey {
		if err := e.AddSigningSubkey(cfg); err != nil {
			return nil, fmt.Errorf("add signing subkey: %w", err)
		}
		k.signer = e.Subkeys[len(e.Subkeys)-1].PrivateKey
	}
	if err := k.serialize(); err != nil {
		return nil, err
	}
	return k, nil
}

// Entity is the key pair as go-crypto holds it, e.g. for Helm's provenance.Signatory.
func (k *PGPKey) Entity() *openpgp.Entity { return k.entity }

// Fingerprint is the primary key's fingerprint in upper-case hex, as verification
// reports it.
func (k *PGPKey) Fingerprint() string {
	return fmt.Sprintf("%X", k.entity.PrimaryKey.Fingerprint)
}

// SigningKeyID is the 16-hex-digit ID of the key that signs (the subkey's, with
// SigningSubkey), as a signature packet names it.
func (k *PGPKey) SigningKeyID() string { return fmt.Sprintf("%016X", k.signer.KeyId) }

// Identity is the key's user ID, "Name (comment) <email>".
func (k *PGPKey) Identity() string {
	if id := k.entity.PrimaryIdentity(); id != nil {
		return id.Name
	}
	return ""
}

// PublicKeyring is the public key as a binary keyring (`gpg --export`).
func (k *PGPKey) PublicKeyring() []byte { return bytes.Clone(k.public) }

// ArmoredPublicKeyring is the public key as an armored keyring (`gpg --export --armor`).
func (k *PGPKey) ArmoredPublicKeyring() []byte { return bytes.Clone(k.armored) }

// Revoke adds a revocation of the key, made at (zero means now), with reason (e.g.
// packet.KeyCompromised, packet.KeyRetired) to its public keyring.
func (k *PGPKey) Revoke(reason packet.ReasonForRevocation, text string, at time.Time) error {
	if at.IsZero() {
		at = time.Now()
	}
	if err := k.entity.RevokeKey(reason, text, &packet.Config{Time: func() time.Time { return at }}); err != nil {
		return fmt.Errorf("revoke key %s: %w", k.Fingerprint(), err)
	}
	return k.serialize()
}

// SetExpiry re-signs the primary identity, dated at (zero means now), so that the
// primary key expires lifetime after its creation (zero means never), as
// `gpg --quick-set-expire` does. Verifiers read the newest self-signature. A signing
// subkey keeps its own expiry.
func (k *PGPKey) SetExpiry(lifetime time.Duration, at time.Time) error {
	if at.IsZero() {
		at = time.Now()
	}
	if lifetime < 0 || lifetime/time.Second > 1<<32-1 {
		return fmt.Errorf("key lifetime %s out of range", lifetime)
	}
	ident := k.entity.PrimaryIdentity()
	if ident == nil {
		return errors.New("key has no identity to re-sign")
	}
	pk := k.entity.PrimaryKey
	secs := uint32(lifetime / time.Second)
	primary := true
	sig := &packet.Signature{
		Version:           pk.Version,
		SigType:           packet.SigTypePositiveCert,
		PubKeyAlgo:        pk.PubKeyAlgo,
		Hash:              crypto.SHA512,
		CreationTime:      at.Truncate(time.Second),
		IssuerKeyId:       &pk.KeyId,
		IssuerFingerprint: pk.Fingerprint,
		KeyLifetimeSecs:   &secs,
		FlagsValid:        true,
		FlagCertify:       true,
		FlagSign:          true,
		IsPrimaryId:       &primary,
	}
	if err := sig.SignUserId(ident.UserId.Id, pk, k.entity.PrivateKey, &packet.Config{Time: func() time.Time { return at }}); err != nil {
		return fmt.Errorf("re-sign identity %q: %w", ident.Name, err)
	}
	ident.SelfSignature = sig
	ident.Signatures = append(ident.Signatures, sig)
	return k.serialize()
}

func (k *PGPKey) serialize() error {
	var public bytes.Buffer
	if err := k.entity.Serialize(&public); err != nil {
		return fmt.Errorf("serialize public key %s: %w", k.Fingerprint(), err)
	}
	armored, err := armorKeyring(public.Bytes())
	if err != nil {
		return err
	}
	k.public, k.armored = public.Bytes(), armored
	return nil
}

// Keyring is the public keys as one binary keyring.
func Keyring(keys ...*PGPKey) []byte {
	var b []byte
	for _, k := range keys {
		b = append(b, k.public...)
	}
	return b
}

// ArmoredKeyring is the public keys as one armored block, as `gpg --export --armor`
// writes several keys.
func ArmoredKeyring(keys ...*PGPKey) []byte {
	b, err := armorKeyring(Keyring(keys...))
	if err != nil {
		// Armoring into memory cannot fail.
		panic(err)
	}
	return b
}

func armorKeyring(binary []byte) ([]byte, error) {
	var out bytes.Buffer
	w, err := armor.Encode(&out, openpgp.PublicKeyType, nil)
	if err != nil {
		return nil, err
	}
	if _, err := w.Write(binary); err != nil {
		return nil, err
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	out.WriteByte('\n')
	return out.Bytes(), nil
}

// SignProvenance is what `helm package --sign` writes as <archive>.prov: Helm's own
// provenance.Signatory clear-signs the archive's Chart.yaml and sha256. A key made with
// SigningSubkey signs with the subkey instead (through SignProvenanceWith).
func (k *PGPKey) SignProvenance(archive []byte) ([]byte, error) {
	if k.signer != k.entity.PrivateKey {
		return k.SignProvenanceWith(archive, SignOptions{})
	}
	ch, err := loader.LoadArchive(bytes.NewReader(archive))
	if err != nil {
		return nil, fmt.Errorf("load chart archive: %w", err)
	}
	meta, err := yaml.Marshal(ch.Metadata)
	if err != nil {
		return nil, fmt.Errorf("marshal chart metadata: %w", err)
	}
	s := &provenance.Signatory{Entity: k.entity}
	prov, err := s.ClearSign(archive, ch.Metadata.Name+"-"+ch.Metadata.Version+".tgz", meta)
	if err != nil {
		return nil, fmt.Errorf("sign provenance: %w", err)
	}
	return []byte(prov), nil
}

// SignProvenanceWith is SignProvenance with the signature's time, lifetime or file name
// chosen; the message is the one Helm signs.
func (k *PGPKey) SignProvenanceWith(archive []byte, opts SignOptions) ([]byte, error) {
	msg, err := ProvenanceMessage(archive, opts.FileName)
	if err != nil {
		return nil, err
	}
	return k.ClearSign(msg, opts)
}

// ClearSign clear-signs any message as Helm does (SHA-512), for provenance files whose
// text a test writes itself. opts.FileName is not used.
func (k *PGPKey) ClearSign(message []byte, opts SignOptions) ([]byte, error) {
	at := opts.Time
	if at.IsZero() {
		at = time.Now()
	}
	if opts.Lifetime < 0 || opts.Lifetime/time.Second > 1<<32-1 {
		return nil, fmt.Errorf("signature lifetime %s out of range", opts.Lifetime)
	}
	cfg := &packet.Config{
		DefaultHash:     crypto.SHA512,
		Time:            func() time.Time { return at },
		SigLifetimeSecs: uint32(opts.Lifetime / time.Second),
	}
	var out bytes.Buffer
	w, err := clearsign.Encode(&out, k.signer, cfg)
	if err != nil {
		return nil, fmt.Errorf("clear-sign: %w", err)
	}
	if _, err := io.Copy(w, bytes.NewReader(message)); err != nil {
		return nil, fmt.Errorf("clear-sign: %w", err)
	}
	if err := w.Close(); err != nil {
		return nil, fmt.Errorf("clear-sign: %w", err)
	}
	return out.Bytes(), nil
}

// ProvenanceMessage is the text Helm signs for archive: its Chart.yaml metadata as
// YAML, the YAML document end marker "...", and the files: digest under fileName
// (empty means <name>-<version>.tgz).
func ProvenanceMessage(archive []byte, fileName string) ([]byte, error) {
	ch, err := loader.LoadArchive(bytes.NewReader(archive))
	if err != nil {
		return nil, fmt.Errorf("load chart archive: %w", err)
	}
	if ch.Metadata == nil {
		return nil, errors.New("chart archive has no Chart.yaml metadata")
	}
	meta, err := yaml.Marshal(ch.Metadata)
	if err != nil {
		return nil, fmt.Errorf("marshal chart metadata: %w", err)
	}
	if fileName == "" {
		fileName = ch.Metadata.Name + "-" + ch.Metadata.Version + ".tgz"
	}
	sum := sha256.Sum256(archive)
	files, err := yaml.Marshal(provenance.SumCollection{
		Files: map[string]string{fileName: "sha256:" + hex.EncodeToString(sum[:])},
	})
	if err != nil {
		return nil, fmt.Errorf("marshal files digest: %w", err)
	}
	// "---" would end the clear-signed text, so Helm separates the documents with "...".
	msg := append(meta, "\n...\n"...)
	return append(msg, files...), nil
}
