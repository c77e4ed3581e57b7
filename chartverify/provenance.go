package chartverify

import (
	"bytes"
	"crypto"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/ProtonMail/go-crypto/openpgp/armor"
	"github.com/ProtonMail/go-crypto/openpgp/clearsign"
	pgperrors "github.com/ProtonMail/go-crypto/openpgp/errors"
	"github.com/ProtonMail/go-crypto/openpgp/packet"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/provenance"
)

const (
	// MaxProvenanceSize bounds the .prov accepted: Helm's are a few KiB, and the whole
	// file is held in memory and parsed.
	MaxProvenanceSize = 1 << 20
	// MaxKeyringSize bounds the keyring accepted; a Secret cannot hold more anyway.
	MaxKeyringSize = 1 << 20

	// futureSkew is how far ahead of this clock a signature may be dated, for a
	// publisher whose clock runs a little fast.
	futureSkew = 5 * time.Minute
	// maxListedKeys caps how many keyring fingerprints a refusal names.
	maxListedKeys = 5
	// maxProvenanceSignatures bounds the signatures in a .prov's signature block:
	// Helm writes one, and a refusal names each. Checking one costs what the
	// keyring's key allows (keyringScan bounds it); the signature's own numbers are
	// length-checked against the key before any arithmetic.
	maxProvenanceSignatures = 8
)

// VerifyProvenance checks that prov, a Helm provenance file (what `helm package --sign`
// writes as <chart>.tgz.prov), is a clear-signed message made by a key of keyring over
// archive: the signature verifies with a keyring key that was valid when it signed, the
// message's files: sha256 is archive's, and the message's chart name and version are the
// archive's Chart.yaml's.
//
// keyring is an OpenPGP public keyring, ASCII-armored (one or several concatenated
// `gpg --export --armor` blocks) or binary (`gpg --export`).
//
// It reads nothing but its arguments. A refusal is an *Error whose Reason says why.
func VerifyProvenance(archive, prov, keyring []byte) (Identity, error) {
	return verifyProvenanceAt(time.Now(), archive, prov, keyring)
}

// verifyProvenanceAt is VerifyProvenance with the verifier's clock given, for tests.
func verifyProvenanceAt(now time.Time, archive, prov, keyring []byte) (Identity, error) {
	// The keyring is the platform's configuration: a broken one is reported whatever
	// the chart, so it is fixed before it matters.
	ring, err := readKeyring(keyring)
	if err != nil {
		return Identity{}, Refuse(ReasonInvalid, "keyring: %v", err)
	}

	if len(prov) == 0 {
		return Identity{}, Refuse(ReasonUnsigned, "provenance: no .prov file for the chart archive")
	}
	if len(prov) > MaxProvenanceSize {
		return Identity{}, Refuse(ReasonInvalid, "provenance: %d bytes, more than the %d accepted", len(prov), MaxProvenanceSize)
	}
	block := decodeClearsigned(prov)
	if block == nil || block.ArmoredSignature == nil {
		return Identity{}, Refuse(ReasonInvalid, "provenance: not an OpenPGP clear-signed message (no BEGIN PGP SIGNED MESSAGE block with its signature)")
	}

	sig, signer, err := checkSignature(now, block, ring)
	if err != nil {
		return Identity{}, err
	}

	// Only now is the message text known to be the signer's; it is read after the
	// signature so that nothing unsigned is interpreted.
	var meta provMetadata
	var sums provenance.SumCollection
	if err := provenance.ParseMessageBlock(block.Plaintext, &meta, &sums); err != nil {
		return Identity{}, Refuse(ReasonInvalid, "provenance: message is not chart metadata and files YAML separated by \"...\": %v", err)
	}

	digest := sha256Digest(archive)
	if err := checkArchive(archive, digest, meta, sums); err != nil {
		return Identity{}, err
	}

	id := Identity{
		Method:         MethodProvenance,
		Digest:         digest,
		KeyFingerprint: fingerprint(signer.PrimaryKey.Fingerprint),
		SignedAt:       sig.CreationTime.UTC(),
	}
	if ident := signer.PrimaryIdentity(); ident != nil {
		id.Signer = ident.Name
	}
	return id, nil
}

// decodeClearsigned is clearsign.Decode, which has no error: nil when prov is not a
// clear-signed message.
func decodeClearsigned(prov []byte) (block *clearsign.Block) {
	err := guard(func() error {
		block, _ = clearsign.Decode(prov)
		return nil
	})
	if err != nil {
		return nil
	}
	return block
}

// guard runs fn, which parses untrusted OpenPGP or chart data with a library, and
// turns a panic into an error. go-crypto v1.4.1 panics on some malformed input (an
// empty exportable-certification subpacket, a clear-signed message with no text; both
// fixed in v1.5.x), and a .prov comes from a chart repository: it must not be able to
// crash the controller.
func guard(fn func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("malformed data made the parser fail: %v", r)
		}
	}()
	return fn()
}

// provMetadata is the part of the signed Chart.yaml copy that is compared with the
// archive's; the rest is not needed to decide.
type provMetadata struct {
	Name    string `json:"name"`
	Version string `json:"version"`
}

// checkSignature verifies the clear-signed message's signature with ring and that the
// key was valid when it signed. It returns the signature and the keyring entity whose
// (primary or sub-) key made it.
func checkSignature(now time.Time, block *clearsign.Block, ring openpgp.EntityList) (*packet.Signature, *openpgp.Entity, error) {
	raw, sigs, err := readSignatures(block.ArmoredSignature)
	if err != nil {
		return nil, nil, Refuse(ReasonInvalid, "provenance signature: %v", err)
	}
	if !slices.ContainsFunc(sigs, func(s *packet.Signature) bool {
		return s.IssuerKeyId != nil && len(ring.KeysByIdUsage(*s.IssuerKeyId, packet.KeyFlagSign)) > 0
	}) {
		return nil, nil, unknownSigner(sigs, ring)
	}

	// go-crypto judges key expiry and revocation at one instant, and counts a
	// self-signature made after that instant (an extended expiry) against the key. Here
	// the signature's own time is the one that matters, so only go-crypto's
	// cryptographic verdict is used (sig and signer are set only when the signature
	// verifies) and checkValidity judges the rest.
	var sig *packet.Signature
	var signer *openpgp.Entity
	err = guard(func() (err error) {
		sig, signer, err = openpgp.VerifyDetachedSignature(ring, bytes.NewReader(block.Bytes), bytes.NewReader(raw), &packet.Config{Time: func() time.Time { return now }})
		return err
	})
	if sig == nil || signer == nil {
		if err == nil {
			err = errors.New("no signer found")
		}
		return nil, nil, classifyVerifyError(err, sigs)
	}
	keys := openpgp.EntityList{signer}.KeysByIdUsage(*sig.IssuerKeyId, packet.KeyFlagSign)
	if len(keys) == 0 {
		// VerifyDetachedSignature found the key this way; not reachable.
		return nil, nil, Refuse(ReasonWrongKey, "provenance signature: %s is not a signing key of %s", describeIssuer(sig), fingerprint(signer.PrimaryKey.Fingerprint))
	}
	if err := checkValidity(now, sig, keys[0]); err != nil {
		return nil, nil, err
	}
	return sig, signer, nil
}

// readSignatures decodes the armored signature block into its packets: all must be
// signatures. raw is the decoded packet stream for the verifier.
func readSignatures(block *armor.Block) (raw []byte, sigs []*packet.Signature, err error) {
	err = guard(func() error {
		raw, sigs, err = readSignaturePackets(block)
		return err
	})
	return raw, sigs, err
}

func readSignaturePackets(block *armor.Block) (raw []byte, sigs []*packet.Signature, err error) {
	if block.Type != openpgp.SignatureType {
		return nil, nil, fmt.Errorf("armored block is %q, not %q", block.Type, openpgp.SignatureType)
	}
	raw, err = io.ReadAll(io.LimitReader(block.Body, MaxProvenanceSize))
	if err != nil {
		return nil, nil, fmt.Errorf("armored signature cannot be decoded: %w", err)
	}
	packets := packet.NewReader(bytes.NewReader(raw))
	for {
		p, err := packets.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, nil, fmt.Errorf("signature packets cannot be read: %w", err)
		}
		sig, ok := p.(*packet.Signature)
		if !ok {
			return nil, nil, fmt.Errorf("signature block holds a %T packet, not only signatures", p)
		}
		if len(sigs) == maxProvenanceSignatures {
			return nil, nil, fmt.Errorf("signature block holds more than %d signatures", maxProvenanceSignatures)
		}
		sigs = append(sigs, sig)
	}
	if len(sigs) == 0 {
		return nil, nil, errors.New("signature block holds no signature")
	}
	return raw, sigs, nil
}

// unknownSigner is the refusal for a signature by no signing key of ring, naming the
// signature's keys and the keyring's so the mismatch can be seen.
func unknownSigner(sigs []*packet.Signature, ring openpgp.EntityList) error {
	var by []string
	held := ""
	for _, s := range sigs {
		by = append(by, describeIssuer(s))
		if s.IssuerKeyId != nil && len(ring.KeysById(*s.IssuerKeyId)) > 0 {
			held = fmt.Sprintf(" (the keyring holds key ID %016X, but not as a key allowed to sign)", *s.IssuerKeyId)
		}
	}
	return Refuse(ReasonWrongKey, "provenance signed by %s, which the keyring does not hold%s; the keyring holds %s",
		strings.Join(by, " and "), held, describeRing(ring))
}

// classifyVerifyError maps go-crypto's refusal of a signature whose issuer the keyring
// holds to a Reason.
func classifyVerifyError(err error, sigs []*packet.Signature) error {
	var structural pgperrors.StructuralError
	var unsupported pgperrors.UnsupportedError
	var weak pgperrors.WeakAlgorithmError
	var invalidArg pgperrors.InvalidArgumentError
	switch {
	case errors.Is(err, pgperrors.ErrUnknownIssuer):
		return Refuse(ReasonWrongKey, "provenance signed by %s, which the keyring does not hold", describeIssuers(sigs))
	case errors.As(err, &structural), errors.As(err, &unsupported), errors.As(err, &weak), errors.As(err, &invalidArg):
		return Refuse(ReasonInvalid, "provenance signature by %s cannot be checked: %s", describeIssuers(sigs), pgpErrorText(err))
	default:
		return Refuse(ReasonWrongKey, "provenance signature by %s does not verify with the keyring's key of that ID (the signed text was changed after signing, or another key made it): %s",
			describeIssuers(sigs), pgpErrorText(err))
	}
}

// checkValidity decides whether key could make sig when sig says it was made, and
// whether sig is still in force now. Like GnuPG, a key that expired after signing
// leaves its signatures good. A revocation voids the signatures made after it, and all
// of them unless its reason is a soft one (superseded, retired): a compromised key's
// signatures can be backdated.
func checkValidity(now time.Time, sig *packet.Signature, key openpgp.Key) error {
	signedAt := sig.CreationTime
	keyFpr := fingerprint(key.PublicKey.Fingerprint)
	primarySelf, primaryIdent := key.Entity.PrimarySelfSignature()
	bySubkey := key.PublicKey != key.Entity.PrimaryKey

	if sig.SigType != packet.SigTypeText && sig.SigType != packet.SigTypeBinary {
		return Refuse(ReasonInvalid, "provenance signature by %s is of type %#x, not a document signature", keyFpr, sig.SigType)
	}
	// go-crypto's v1 API accepts any hash it knows; collisions in these are practical
	// or near it, and Helm signs with SHA-512.
	switch sig.Hash {
	case crypto.MD5, crypto.SHA1, crypto.RIPEMD160:
		return Refuse(ReasonInvalid, "provenance signature by %s uses the broken hash %s", keyFpr, sig.Hash)
	}

	// Self-signatures bind the key to its identity and subkeys; all must be usable.
	selfSigs := []*packet.Signature{primarySelf}
	if bySubkey {
		selfSigs = append(selfSigs, key.SelfSignature)
		if key.SelfSignature != nil {
			selfSigs = append(selfSigs, key.SelfSignature.EmbeddedSignature)
		}
	}
	for _, s := range append([]*packet.Signature{sig}, selfSigs...) {
		if s == nil {
			continue
		}
		for _, n := range s.Notations {
			if n.IsCritical {
				return Refuse(ReasonInvalid, "provenance signature by %s or its key's self-signature carries critical notation %q, which this verifier does not know", keyFpr, n.Name)
			}
		}
	}

	primaryFpr := fingerprint(key.Entity.PrimaryKey.Fingerprint)
	if rev := revocationAt(key.Entity.Revocations, signedAt); rev != nil {
		return revoked("signing key "+primaryFpr, rev, signedAt)
	}
	if bySubkey {
		if rev := revocationAt(key.Revocations, signedAt); rev != nil {
			return revoked("signing subkey "+keyFpr, rev, signedAt)
		}
	}
	if primaryIdent != nil {
		if rev := revocationAt(primaryIdent.Revocations, signedAt); rev != nil {
			return revoked(fmt.Sprintf("identity %q of signing key %s", primaryIdent.Name, primaryFpr), rev, signedAt)
		}
	}

	if err := keyValidAt(key.Entity.PrimaryKey, primarySelf, "signing key", signedAt); err != nil {
		return err
	}
	if bySubkey {
		if err := keyValidAt(key.PublicKey, key.SelfSignature, "signing subkey", signedAt); err != nil {
			return err
		}
	}
	for _, s := range selfSigs {
		if end, ok := lifetimeEnd(s); ok && end.Before(signedAt) {
			return Refuse(ReasonExpired, "self-signature of signing key %s expired on %s, before the provenance was signed %s",
				keyFpr, date(end), date(signedAt))
		}
	}

	if signedAt.After(now.Add(futureSkew)) {
		return Refuse(ReasonExpired, "provenance signature by %s is dated %s, in the future (now is %s)", keyFpr, date(signedAt), date(now))
	}
	if end, ok := lifetimeEnd(sig); ok && now.After(end) {
		return Refuse(ReasonExpired, "provenance signature by %s made %s expired on %s", keyFpr, date(signedAt), date(end))
	}
	return nil
}

// revoked is the refusal for what, revoked by rev, having made a signature at signedAt.
func revoked(what string, rev *packet.Signature, signedAt time.Time) error {
	if softRevocation(rev) {
		return Refuse(ReasonExpired, "%s was revoked on %s (%s), before the provenance was signed %s",
			what, date(rev.CreationTime), revocationReason(rev), date(signedAt))
	}
	return Refuse(ReasonExpired, "%s was revoked on %s (%s), which voids all its signatures; the provenance was signed %s",
		what, date(rev.CreationTime), revocationReason(rev), date(signedAt))
}

// keyValidAt refuses when pk, as bound by selfSig, did not exist yet or had expired at t.
func keyValidAt(pk *packet.PublicKey, selfSig *packet.Signature, what string, t time.Time) error {
	fpr := fingerprint(pk.Fingerprint)
	if pk.CreationTime.After(t) {
		return Refuse(ReasonExpired, "%s %s was created %s, after the provenance was signed %s", what, fpr, date(pk.CreationTime), date(t))
	}
	if selfSig == nil || selfSig.KeyLifetimeSecs == nil || *selfSig.KeyLifetimeSecs == 0 {
		return nil
	}
	expiry := pk.CreationTime.Add(time.Duration(*selfSig.KeyLifetimeSecs) * time.Second)
	if t.After(expiry) {
		return Refuse(ReasonExpired, "%s %s expired on %s, before the provenance was signed %s", what, fpr, date(expiry), date(t))
	}
	return nil
}

// lifetimeEnd is when s expires, if it does.
func lifetimeEnd(s *packet.Signature) (time.Time, bool) {
	if s == nil || s.SigLifetimeSecs == nil || *s.SigLifetimeSecs == 0 {
		return time.Time{}, false
	}
	return s.CreationTime.Add(time.Duration(*s.SigLifetimeSecs) * time.Second), true
}

// revocationAt returns the revocation among revs that voids a signature made at t:
// one made by then, or a hard one (compromised, no or an unknown reason) made any time.
// go-crypto verified each when it read the keyring.
func revocationAt(revs []*packet.Signature, t time.Time) *packet.Signature {
	for _, r := range revs {
		if !softRevocation(r) || !r.CreationTime.After(t) {
			return r
		}
	}
	return nil
}

// softRevocation reports a revocation that says the key was retired or replaced, not
// compromised: signatures made before it stand (RFC 9580, section 5.2.3.31).
func softRevocation(r *packet.Signature) bool {
	if r.RevocationReason == nil {
		return false
	}
	switch *r.RevocationReason {
	case packet.KeySuperseded, packet.KeyRetired, packet.UserIDNotValid:
		return true
	}
	return false
}

func revocationReason(r *packet.Signature) string {
	reason := "no reason given"
	if r.RevocationReason != nil {
		switch *r.RevocationReason {
		case packet.KeySuperseded:
			reason = "superseded"
		case packet.KeyCompromised:
			reason = "compromised"
		case packet.KeyRetired:
			reason = "retired"
		case packet.UserIDNotValid:
			reason = "user ID no longer valid"
		default:
			reason = fmt.Sprintf("reason %d", *r.RevocationReason)
		}
	}
	if r.RevocationReasonText != "" {
		reason += ": " + r.RevocationReasonText
	}
	return reason
}

// checkArchive compares the signed message with the archive: the files: digest, then
// the chart's name and version. The archive's own Chart.yaml names the entry to look
// at; an archive Helm cannot load falls back to the message's single entry.
func checkArchive(archive []byte, digest string, meta provMetadata, sums provenance.SumCollection) error {
	var ch *chart.Chart
	loadErr := guard(func() (err error) {
		ch, err = loader.LoadArchive(bytes.NewReader(archive))
		return err
	})
	var name, version string
	if loadErr == nil && ch != nil && ch.Metadata != nil {
		name, version = ch.Metadata.Name, ch.Metadata.Version
	}

	file, want, err := signedFile(sums.Files, name, version)
	if err != nil {
		return err
	}
	if !strings.EqualFold(strings.TrimSpace(want), digest) {
		return Refuse(ReasonTampered, "archive digest %s is not the %s the provenance signs for %s", digest, want, file)
	}

	if name == "" {
		return nil
	}
	if meta.Name != name {
		return Refuse(ReasonTampered, "provenance signs chart name %q, the archive's Chart.yaml says %q", meta.Name, name)
	}
	if meta.Version != version {
		return Refuse(ReasonTampered, "provenance signs chart version %q, the archive's Chart.yaml says %q", meta.Version, version)
	}
	return nil
}

// signedFile picks the files: entry for the archive: <name>-<version>.tgz as Helm names
// it, else the only entry.
func signedFile(files map[string]string, name, version string) (file, digest string, err error) {
	if name != "" {
		file = name + "-" + version + ".tgz"
		if d, ok := files[file]; ok {
			return file, d, nil
		}
	}
	switch len(files) {
	case 0:
		return "", "", Refuse(ReasonTampered, "provenance files: names no archive digest")
	case 1:
		for f, d := range files {
			return f, d, nil
		}
	}
	names := make([]string, 0, len(files))
	for f := range files {
		names = append(names, f)
	}
	slices.Sort(names)
	if file != "" {
		return "", "", Refuse(ReasonTampered, "provenance files: names %s, not %s", strings.Join(names, ", "), file)
	}
	return "", "", Refuse(ReasonTampered, "provenance files: names %s and the archive has no readable Chart.yaml to choose by", strings.Join(names, ", "))
}

// readKeyring reads an armored or binary OpenPGP keyring. Its packets are vetted
// (keyringScan) before go-crypto reads them, and its refusals quote none of the
// keyring's bytes: it is a Secret's value.
func readKeyring(data []byte) (openpgp.EntityList, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, errors.New("empty")
	}
	if len(data) > MaxKeyringSize {
		return nil, fmt.Errorf("%d bytes, more than the %d accepted", len(data), MaxKeyringSize)
	}
	if isKeybox(data) {
		return nil, errors.New("a GnuPG keybox (pubring.kbx), not a keyring: export the keys with `gpg --export --armor`")
	}

	var ring openpgp.EntityList
	err := guard(func() (err error) {
		scan := new(keyringScan)
		if bytes.HasPrefix(bytes.TrimSpace(data), []byte("-----BEGIN PGP")) {
			ring, err = readArmoredKeyring(data, scan)
			return err
		}
		vetted, err := scan.vet(bytes.NewReader(data))
		if err != nil && scan.packets == 0 {
			return fmt.Errorf("not an armored keyring and not a binary one: %w", err)
		}
		if err != nil {
			return err
		}
		if ring, err = openpgp.ReadKeyRing(bytes.NewReader(vetted)); err != nil {
			return fmt.Errorf("not an armored keyring and not a binary one: %s", pgpErrorText(err))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(ring) == 0 {
		return nil, errors.New("holds no OpenPGP keys")
	}
	return ring, nil
}

// isKeybox reports GnuPG 2.1's pubring.kbx format, by its first blob's header.
func isKeybox(data []byte) bool {
	return len(data) >= 12 && data[4] == 1 && string(data[8:12]) == "KBXf"
}

// readArmoredKeyring reads every armored key block in data, which is how several
// exports concatenated into one Secret value read. Each block is decoded on its own
// because the armor decoder reads ahead of the block it returns; scan vets them all.
func readArmoredKeyring(data []byte, scan *keyringScan) (openpgp.EntityList, error) {
	var ring openpgp.EntityList
	for i, chunk := range armoredChunks(data) {
		block, err := armor.Decode(bytes.NewReader(chunk))
		if err != nil {
			return nil, fmt.Errorf("armored block %d: %s", i+1, pgpErrorText(err))
		}
		switch block.Type {
		case openpgp.PublicKeyType:
		case openpgp.PrivateKeyType:
			return nil, fmt.Errorf("armored block %d is %q: a verification keyring holds public keys only (export them with `gpg --export --armor`)", i+1, block.Type)
		case openpgp.SignatureType, "PGP MESSAGE", "PGP SIGNED MESSAGE":
			return nil, fmt.Errorf("armored block %d is %q, not %q", i+1, block.Type, openpgp.PublicKeyType)
		default:
			// Another type is not named: it is text of a Secret's value.
			return nil, fmt.Errorf("armored block %d is not %q", i+1, openpgp.PublicKeyType)
		}
		vetted, err := scan.vet(block.Body)
		if err != nil {
			return nil, fmt.Errorf("armored block %d: %w", i+1, err)
		}
		keys, err := openpgp.ReadKeyRing(bytes.NewReader(vetted))
		if err != nil {
			return nil, fmt.Errorf("armored block %d: %s", i+1, pgpErrorText(err))
		}
		ring = append(ring, keys...)
	}
	return ring, nil
}

// armoredChunks splits data before each line that begins an armored block.
func armoredChunks(data []byte) [][]byte {
	marker := []byte("-----BEGIN PGP")
	var starts []int
	for i := 0; i < len(data); {
		j := bytes.Index(data[i:], marker)
		if j < 0 {
			break
		}
		at := i + j
		if at == 0 || data[at-1] == '\n' || isBlankBefore(data, at) {
			starts = append(starts, at)
		}
		i = at + len(marker)
	}
	chunks := make([][]byte, 0, len(starts))
	for k, s := range starts {
		e := len(data)
		if k+1 < len(starts) {
			e = starts[k+1]
		}
		chunks = append(chunks, data[s:e])
	}
	return chunks
}

// isBlankBefore reports whether only spaces and tabs precede at on its line.
func isBlankBefore(data []byte, at int) bool {
	for i := at - 1; i >= 0; i-- {
		switch data[i] {
		case ' ', '\t', '\r':
			continue
		case '\n':
			return true
		default:
			return false
		}
	}
	return true
}

func describeIssuer(s *packet.Signature) string {
	switch {
	case len(s.IssuerFingerprint) > 0 && s.IssuerKeyId != nil:
		return fmt.Sprintf("key ID %016X (fingerprint %s)", *s.IssuerKeyId, fingerprint(s.IssuerFingerprint))
	case len(s.IssuerFingerprint) > 0:
		return "key fingerprint " + fingerprint(s.IssuerFingerprint)
	case s.IssuerKeyId != nil:
		return fmt.Sprintf("key ID %016X", *s.IssuerKeyId)
	}
	return "a signature naming no key"
}

func describeIssuers(sigs []*packet.Signature) string {
	var by []string
	for _, s := range sigs {
		by = append(by, describeIssuer(s))
	}
	return strings.Join(by, " and ")
}

func describeRing(ring openpgp.EntityList) string {
	var fprs []string
	for i, e := range ring {
		if i == maxListedKeys {
			fprs = append(fprs, fmt.Sprintf("%d more", len(ring)-maxListedKeys))
			break
		}
		fprs = append(fprs, fingerprint(e.PrimaryKey.Fingerprint))
	}
	return strings.Join(fprs, ", ")
}

func fingerprint(b []byte) string { return strings.ToUpper(hex.EncodeToString(b)) }

func sha256Digest(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

func date(t time.Time) string { return t.UTC().Format(time.RFC3339) }
