package chartverify

import (
	"bytes"
	"crypto/dsa" //nolint:staticcheck // go-crypto still reads and verifies DSA keys; their size must be bounded
	"crypto/rsa"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"

	"github.com/ProtonMail/go-crypto/openpgp/elgamal"
	pgperrors "github.com/ProtonMail/go-crypto/openpgp/errors"
	"github.com/ProtonMail/go-crypto/openpgp/packet"
)

// go-crypto checks every self-signature of a key as it reads the keyring, with no
// bound on the key's parameters and no way to cancel: one self-signature of a DSA key
// with 65,528-bit parameters costs minutes of CPU, and a keyring is whatever a tenant
// puts in a Secret. So the keyring's packets are vetted before go-crypto reads them.
const (
	// maxKeyringKeys bounds the keys (primary keys) a keyring holds.
	maxKeyringKeys = 64
	// maxKeyringPackets bounds the packets a keyring holds: keys, user IDs,
	// signatures (third-party certifications included).
	maxKeyringPackets = 4096
	// maxKeyringCheckedSignatures bounds the signatures go-crypto checks while
	// reading the keyring (self-signatures, subkey bindings, revocations). At the
	// slowest a bounded key verifies (brainpoolP512r1, some 6 ms) that is about 3 s;
	// an RSA, DSA or NIST-curve keyring is well under a second.
	maxKeyringCheckedSignatures = 512

	// maxRSABits is the largest RSA modulus accepted: GnuPG makes up to 4096 bits,
	// 8192 with --enable-large-rsa.
	maxRSABits = 8192
	// maxDSAPBits and maxDSAQBits are the largest DSA parameters accepted, FIPS
	// 186's largest (L = 3072, N = 256).
	maxDSAPBits = 3072
	maxDSAQBits = 256
	// maxElGamalBits is the largest ElGamal prime accepted. An ElGamal key only
	// encrypts, so nothing here computes with it; this is GnuPG's largest.
	maxElGamalBits = 4096
	// maxUnreadableKeyBytes bounds a key packet of an algorithm go-crypto cannot
	// read (it skips such keys): an honest one is a few hundred bytes.
	maxUnreadableKeyBytes = 4096
)

// OpenPGP packet tags (RFC 9580, section 5).
const (
	tagSignature        = 2
	tagSecretKey        = 5
	tagPublicKey        = 6
	tagSecretSubkey     = 7
	tagMarker           = 10
	tagTrust            = 12
	tagUserID           = 13
	tagPublicSubkey     = 14
	tagUserAttribute    = 17
	tagPadding          = 21
	tagFirstNonCritical = 40
)

// keyringScan vets a keyring's packets, across all of its armored blocks, before
// go-crypto reads them.
type keyringScan struct {
	packets, keys, checked int
	// n is the number of the packet in its block (or binary keyring), for refusals.
	n int
	// primary is the key whose packets follow (nil when go-crypto cannot read it);
	// afterIdentity is set while they follow a user ID or attribute, whose
	// third-party certifications go-crypto keeps without checking them.
	primary       *packet.PublicKey
	afterIdentity bool
}

// vet reads the packets of one binary keyring (or armored block's body) as
// go-crypto's packet reader frames them and refuses what would cost go-crypto more
// than the bounds above. It returns the packets re-framed, each with its definite
// length: openpgp.ReadKeyRing is given those, so it reads exactly the packets vetted
// (a packet go-crypto parses without reading it whole would otherwise have the rest
// read as further packets; vet refuses those too).
func (s *keyringScan) vet(r io.Reader) ([]byte, error) {
	var out bytes.Buffer
	ops := packet.NewOpaqueReader(r)
	s.n = 0
	for {
		op, err := ops.Next()
		if errors.Is(err, io.EOF) && op == nil {
			return out.Bytes(), nil
		}
		if err != nil {
			return nil, fmt.Errorf("packet %d cannot be framed: %s", s.n+1, pgpErrorText(err))
		}
		s.packets++
		s.n++
		if s.packets > maxKeyringPackets {
			return nil, fmt.Errorf("more than %d OpenPGP packets; a keyring of up to %d keys needs far fewer", maxKeyringPackets, maxKeyringKeys)
		}
		if err := s.vetPacket(op); err != nil {
			return nil, err
		}
		if err := op.Serialize(&out); err != nil {
			return nil, fmt.Errorf("packet %d: %s", s.n, pgpErrorText(err))
		}
	}
}

func (s *keyringScan) vetPacket(op *packet.OpaquePacket) error {
	switch {
	case op.Tag == tagSecretKey || op.Tag == tagSecretSubkey:
		// go-crypto validates an unencrypted secret key as it parses it, with
		// exponentiations as costly as a huge key's self-signature; and a verifier
		// has no use for a secret key, which does not belong in its Secret.
		return fmt.Errorf("packet %d is a secret key: a verification keyring holds public keys only (export them with `gpg --export --armor`)", s.n)
	case op.Tag == tagPublicKey || op.Tag == tagPublicSubkey:
		return s.vetKey(op)
	case op.Tag == tagSignature:
		return s.vetSignature(op)
	case op.Tag == tagUserID, op.Tag == tagUserAttribute:
		s.afterIdentity = true
		_, err := s.parseWhole(op)
		return err
	case op.Tag == tagMarker, op.Tag == tagTrust, op.Tag == tagPadding, op.Tag >= tagFirstNonCritical:
		// Skipped by go-crypto; GnuPG writes trust packets in old keyrings.
		_, err := s.parseWhole(op)
		return err
	}
	// Compressed, literal and encrypted data are streamed: go-crypto would read their
	// contents as the keyring's next packets.
	return fmt.Errorf("packet %d is of type %d, which a keyring does not hold", s.n, op.Tag)
}

// parseWhole parses op as go-crypto does and refuses a packet it does not read
// whole: in a stream, the rest would be read as further packets, unvetted. p is nil
// when go-crypto cannot parse the packet: it skips it, or fails the whole keyring.
func (s *keyringScan) parseWhole(op *packet.OpaquePacket) (p packet.Packet, err error) {
	var framed bytes.Buffer
	if err := op.Serialize(&framed); err != nil {
		return nil, fmt.Errorf("packet %d: %s", s.n, pgpErrorText(err))
	}
	r := bytes.NewReader(framed.Bytes())
	p, parseErr := packet.Read(r)
	if r.Len() > 0 {
		return nil, fmt.Errorf("packet %d (type %d) has %d bytes after what it holds", s.n, op.Tag, r.Len())
	}
	if parseErr != nil {
		return nil, nil
	}
	return p, nil
}

// vetKey bounds a public key's or subkey's parameters: go-crypto checks signatures
// with them as it reads the keyring.
func (s *keyringScan) vetKey(op *packet.OpaquePacket) error {
	primary := op.Tag == tagPublicKey
	if primary {
		s.keys++
		if s.keys > maxKeyringKeys {
			return fmt.Errorf("more than %d keys; a definition trusts fewer", maxKeyringKeys)
		}
	}
	p, err := s.parseWhole(op)
	if err != nil {
		return err
	}
	pk, ok := p.(*packet.PublicKey)
	if !ok {
		// go-crypto cannot read the key (an unknown or experimental algorithm, a
		// malformed one) and skips it with its signatures; only its size is bounded.
		if primary {
			s.primary = nil
		}
		s.afterIdentity = false
		if len(op.Contents) > maxUnreadableKeyBytes {
			what := "key"
			if !primary {
				what = "subkey"
			}
			algo := "an unknown public-key algorithm"
			if len(op.Contents) > 5 {
				algo = fmt.Sprintf("public-key algorithm %d", op.Contents[5])
			}
			return fmt.Errorf("packet %d is a %s of %s, which this verifier cannot read, holding %d bytes; at most %d are accepted",
				s.n, what, algo, len(op.Contents), maxUnreadableKeyBytes)
		}
		return nil
	}
	what := "key " + fingerprint(pk.Fingerprint)
	s.afterIdentity = false
	if primary {
		s.primary = pk
	} else if s.primary != nil {
		what = fmt.Sprintf("subkey %s of key %s", fingerprint(pk.Fingerprint), fingerprint(s.primary.Fingerprint))
	}
	return checkKeySize(what, pk)
}

// checkKeySize refuses a key whose signatures cost more than a bounded key's to
// check.
func checkKeySize(what string, pk *packet.PublicKey) error {
	const why = "checking a larger key's signatures can take minutes of CPU"
	switch k := pk.PublicKey.(type) {
	case *rsa.PublicKey:
		if bits := k.N.BitLen(); bits > maxRSABits {
			return fmt.Errorf("%s is RSA with a %d-bit modulus, more than the %d bits accepted: %s", what, bits, maxRSABits, why)
		}
	case *dsa.PublicKey:
		if p, q := k.P.BitLen(), k.Q.BitLen(); p > maxDSAPBits || q > maxDSAQBits {
			return fmt.Errorf("%s is DSA with a %d-bit p and a %d-bit q, more than the %d and %d bits accepted: %s",
				what, p, q, maxDSAPBits, maxDSAQBits, why)
		}
	case *elgamal.PublicKey:
		if bits := k.P.BitLen(); bits > maxElGamalBits {
			return fmt.Errorf("%s is ElGamal with a %d-bit prime, more than the %d bits accepted", what, bits, maxElGamalBits)
		}
	}
	// The other algorithms go-crypto reads have fixed sizes (elliptic curves, ML-DSA,
	// SLH-DSA).
	return nil
}

// vetSignature counts the signatures go-crypto will check as it reads the keyring:
// all but third-party certifications of a user ID or attribute, which it keeps
// unchecked (an honest keyring may hold many of those).
func (s *keyringScan) vetSignature(op *packet.OpaquePacket) error {
	p, err := s.parseWhole(op)
	if err != nil {
		return err
	}
	sig, ok := p.(*packet.Signature)
	if !ok {
		return nil // go-crypto cannot read it and skips it
	}
	if s.afterIdentity && isCertification(sig.SigType) && namesOtherIssuer(sig, s.primary) {
		return nil
	}
	s.checked++
	if sig.EmbeddedSignature != nil {
		s.checked++ // a signing subkey's binding: its back-signature is checked too
	}
	if s.checked > maxKeyringCheckedSignatures {
		return fmt.Errorf("more than %d self-signatures, subkey bindings and revocations, which are checked as the keyring is read; trust fewer keys or export them with `gpg --export-options export-minimal`",
			maxKeyringCheckedSignatures)
	}
	return nil
}

func isCertification(t packet.SignatureType) bool {
	switch t {
	case packet.SigTypeGenericCert, packet.SigTypePersonaCert, packet.SigTypeCasualCert, packet.SigTypePositiveCert,
		packet.SigTypeCertificationRevocation:
		return true
	}
	return false
}

// namesOtherIssuer reports a signature that names an issuer, and not primary by
// key ID nor by fingerprint: go-crypto then does not check it as a self-signature.
func namesOtherIssuer(sig *packet.Signature, primary *packet.PublicKey) bool {
	if sig.IssuerKeyId == nil && len(sig.IssuerFingerprint) == 0 {
		return false
	}
	if primary == nil {
		return true
	}
	byID := sig.IssuerKeyId != nil && *sig.IssuerKeyId == primary.KeyId
	byFingerprint := len(sig.IssuerFingerprint) > 0 && bytes.Equal(sig.IssuerFingerprint, primary.Fingerprint)
	return !byID && !byFingerprint
}

// pgpErrorText is go-crypto's error without what it quotes from the data: a keyring
// is a Secret's value, and a refusal is shown to whoever may read the definition or
// its events. go-crypto quotes data after a colon ("unknown oid: 2b06…"), so only
// the clause before it is kept, and the numbers in it are masked.
func pgpErrorText(err error) string {
	var (
		structural  pgperrors.StructuralError
		unsupported pgperrors.UnsupportedError
		invalidArg  pgperrors.InvalidArgumentError
		signature   pgperrors.SignatureError
		keyInvalid  pgperrors.KeyInvalidError
		weak        pgperrors.WeakAlgorithmError
		b64         base64.CorruptInputError
	)
	switch {
	case errors.As(err, &structural):
		return "invalid data: " + firstClause(string(structural))
	case errors.As(err, &unsupported):
		return "unsupported: " + firstClause(string(unsupported))
	case errors.As(err, &invalidArg):
		return "invalid argument: " + firstClause(string(invalidArg))
	case errors.As(err, &signature):
		return "invalid signature: " + firstClause(string(signature))
	case errors.As(err, &keyInvalid):
		return "invalid key: " + firstClause(string(keyInvalid))
	case errors.As(err, &weak):
		return "weak algorithm: " + firstClause(string(weak))
	case errors.As(err, &b64):
		return fmt.Sprintf("not base64 at byte %d", int64(b64))
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return "truncated"
	}
	// go-crypto's sentinels (key expired, revoked, unknown issuer…) and the
	// standard library's verification errors quote nothing.
	return err.Error()
}

// firstClause is s up to its first colon, where data quoted in an error begins,
// with the numbers it read from the data ("public key version 84") masked.
func firstClause(s string) string {
	before, _, _ := strings.Cut(s, ":")
	return dataNumber.ReplaceAllString(strings.TrimSpace(before), "N")
}

var dataNumber = regexp.MustCompile(`\bv?[0-9]+\b`)
