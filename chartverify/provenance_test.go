package chartverify

import (
	"bytes"
	"crypto"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/ProtonMail/go-crypto/openpgp/armor"
	"github.com/ProtonMail/go-crypto/openpgp/clearsign"
	"github.com/ProtonMail/go-crypto/openpgp/packet"
	"helm.sh/helm/v4/pkg/chart/common"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	chartutil "helm.sh/helm/v4/pkg/chart/v2/util"
	"helm.sh/helm/v4/pkg/provenance"
	"sigs.k8s.io/yaml"

	"github.com/compositor-dev/compositor/test/samplecharts"
	"github.com/compositor-dev/compositor/test/signing"
)

// packageChart is fireworks-app at version as `helm package` archives it, after edit
// (if any) changed the chart.
func packageChart(t testing.TB, version string, edit func(*chart.Chart)) []byte {
	t.Helper()
	ch, err := samplecharts.Load(version)
	if err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		edit(ch)
	}
	path, err := chartutil.Save(ch, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func newKey(t testing.TB, name string, opts signing.PGPKeyOptions) *signing.PGPKey {
	t.Helper()
	k, err := signing.NewPGPKey(name, strings.ToLower(strings.Fields(name)[0])+"@example.com", opts)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// must is for a test's setup, which does not fail unless something else is broken.
func must[T any](v T, err error) T {
	if err != nil {
		panic("test setup: " + err.Error())
	}
	return v
}

func digestOf(b []byte) string {
	s := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(s[:])
}

// fixture is what the table's cases are made of: real keys and archives.
type fixture struct {
	archive, other, nextVersion []byte // 1.1.5; the same chart with another template; 1.1.6
	alice, bob                  *signing.PGPKey
	prov                        []byte // alice's, by Helm's Signatory, over archive
}

func newFixture(t testing.TB) *fixture {
	t.Helper()
	f := &fixture{
		archive: packageChart(t, "1.1.5", nil),
		other: packageChart(t, "1.1.5", func(ch *chart.Chart) {
			ch.Templates[0].Data = append(ch.Templates[0].Data, "\n# not what was signed\n"...)
		}),
		nextVersion: packageChart(t, "1.1.6", nil),
		alice:       newKey(t, "Alice Publisher", signing.PGPKeyOptions{Comment: "charts"}),
		bob:         newKey(t, "Bob Other", signing.PGPKeyOptions{}),
	}
	f.prov = must(f.alice.SignProvenance(f.archive))
	return f
}

func TestVerifyProvenance(t *testing.T) {
	f := newFixture(t)
	now := time.Now()
	hour := time.Hour

	expiredKey := newKey(t, "Eve Expired", signing.PGPKeyOptions{Created: now.Add(-48 * hour), Lifetime: 24 * hour})
	expiresLater := newKey(t, "Lou Lapsed", signing.PGPKeyOptions{Created: now.Add(-72 * hour), Lifetime: 48 * hour})
	compromised := newKey(t, "Carl Compromised", signing.PGPKeyOptions{Created: now.Add(-72 * hour)})
	compromisedProv := must(compromised.SignProvenanceWith(f.archive, signing.SignOptions{Time: now.Add(-48 * hour)}))
	if err := compromised.Revoke(packet.KeyCompromised, "key leaked", now.Add(-hour)); err != nil {
		t.Fatal(err)
	}
	retired := newKey(t, "Rita Retired", signing.PGPKeyOptions{Created: now.Add(-72 * hour)})
	retiredBefore := must(retired.SignProvenanceWith(f.archive, signing.SignOptions{Time: now.Add(-48 * hour)}))
	retiredAfter := must(retired.SignProvenanceWith(f.archive, signing.SignOptions{Time: now.Add(-10 * time.Minute)}))
	if err := retired.Revoke(packet.KeyRetired, "superseded by a new key", now.Add(-hour)); err != nil {
		t.Fatal(err)
	}
	// Expired a day ago, signed before that, and extended an hour ago: the newer
	// self-signature must not count against the older provenance.
	extended := newKey(t, "Ed Extended", signing.PGPKeyOptions{Created: now.Add(-72 * hour), Lifetime: 48 * hour})
	extendedProv := must(extended.SignProvenanceWith(f.archive, signing.SignOptions{Time: now.Add(-36 * hour)}))
	if err := extended.SetExpiry(96*hour, now.Add(-hour)); err != nil {
		t.Fatal(err)
	}
	extendedKey := must(openpgp.ReadArmoredKeyRing(bytes.NewReader(extended.ArmoredPublicKeyring())))[0]
	if self, _ := extendedKey.PrimarySelfSignature(); extendedKey.PrimaryKey.KeyExpired(self, now) {
		t.Fatal("the extended key's keyring still has it expired")
	}
	veteran := newKey(t, "Vera Veteran", signing.PGPKeyOptions{Created: now.Add(-72 * hour)})
	subkeyed := newKey(t, "Sam Subkey", signing.PGPKeyOptions{SigningSubkey: true})

	signText := func(k *signing.PGPKey, text string) []byte {
		return must(k.ClearSign([]byte(text), signing.SignOptions{}))
	}
	message := string(must(signing.ProvenanceMessage(f.archive, "")))

	// handSigned clear-signs message the long way, with hash, as another OpenPGP tool
	// might (go-crypto's own writers refuse SHA-1).
	handSigned := func(k *signing.PGPKey, hash crypto.Hash) []byte {
		text := strings.TrimSuffix(message, "\n")
		priv := k.Entity().PrivateKey
		sig := &packet.Signature{
			Version: priv.PublicKey.Version, SigType: packet.SigTypeText, PubKeyAlgo: priv.PublicKey.PubKeyAlgo,
			Hash: hash, CreationTime: now, IssuerKeyId: &priv.KeyId, IssuerFingerprint: priv.Fingerprint,
		}
		h := hash.New()
		h.Write([]byte(strings.ReplaceAll(text, "\n", "\r\n"))) // a text signature hashes CRLF lines
		// go-crypto's salt notation has no length for SHA-1; leave it out.
		noSalt := false
		if err := sig.Sign(h, priv, &packet.Config{NonDeterministicSignaturesViaNotation: &noSalt}); err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		if err := sig.Serialize(&b); err != nil {
			t.Fatal(err)
		}
		return clearSigned(text, b.Bytes())
	}

	type want struct {
		reason   Reason // "" is success
		contains []string
	}
	cases := []struct {
		name                   string
		archive, prov, keyring []byte
		want                   want
	}{
		{name: "valid, armored keyring", archive: f.archive, prov: f.prov, keyring: f.alice.ArmoredPublicKeyring()},
		{name: "valid, binary keyring", archive: f.archive, prov: f.prov, keyring: f.alice.PublicKeyring()},
		{name: "valid, keyring of several keys in one armored block", archive: f.archive, prov: f.prov,
			keyring: signing.ArmoredKeyring(f.bob, f.alice, expiredKey)},
		{name: "valid, keyring of concatenated armored exports", archive: f.archive, prov: f.prov,
			keyring: bytes.Join([][]byte{f.bob.ArmoredPublicKeyring(), f.alice.ArmoredPublicKeyring()}, []byte("\n"))},
		{name: "valid, binary keyring of several keys", archive: f.archive, prov: f.prov, keyring: signing.Keyring(f.bob, f.alice)},
		{name: "valid, files: entry under another name", archive: f.archive,
			prov:    must(f.alice.SignProvenanceWith(f.archive, signing.SignOptions{FileName: "download.tgz"})),
			keyring: f.alice.ArmoredPublicKeyring()},
		{name: "valid, key expired after signing", archive: f.archive,
			prov:    must(expiresLater.SignProvenanceWith(f.archive, signing.SignOptions{Time: now.Add(-36 * hour)})),
			keyring: expiresLater.ArmoredPublicKeyring()},
		{name: "valid, key's expiry extended after signing", archive: f.archive, prov: extendedProv, keyring: extended.ArmoredPublicKeyring()},
		{name: "valid, key retired after signing", archive: f.archive, prov: retiredBefore, keyring: retired.ArmoredPublicKeyring()},
		{name: "valid, signature not yet expired", archive: f.archive,
			prov:    must(veteran.SignProvenanceWith(f.archive, signing.SignOptions{Time: now.Add(-2 * hour), Lifetime: 3 * hour})),
			keyring: veteran.ArmoredPublicKeyring()},
		{name: "valid, clear-signed by another tool", archive: f.archive, prov: handSigned(f.alice, crypto.SHA256),
			keyring: f.alice.ArmoredPublicKeyring()},

		{name: "unsigned, nil prov", archive: f.archive, prov: nil, keyring: f.alice.ArmoredPublicKeyring(),
			want: want{ReasonUnsigned, nil}},
		{name: "unsigned, empty prov", archive: f.archive, prov: []byte{}, keyring: f.alice.ArmoredPublicKeyring(),
			want: want{ReasonUnsigned, nil}},

		{name: "tampered, another archive with the original prov", archive: f.other, prov: f.prov, keyring: f.alice.ArmoredPublicKeyring(),
			want: want{ReasonTampered, []string{digestOf(f.other), digestOf(f.archive)}}},
		{name: "tampered, another version with the original prov", archive: f.nextVersion, prov: f.prov, keyring: f.alice.ArmoredPublicKeyring(),
			want: want{ReasonTampered, []string{digestOf(f.nextVersion), digestOf(f.archive)}}},
		{name: "tampered, signed metadata names another chart", archive: f.archive,
			prov:    signText(f.alice, strings.Replace(message, "name: fireworks-app", "name: other-app", 1)),
			keyring: f.alice.ArmoredPublicKeyring(), want: want{ReasonTampered, []string{`"other-app"`, `"fireworks-app"`}}},
		{name: "tampered, signed metadata names another version", archive: f.archive,
			prov:    signText(f.alice, strings.Replace(message, "version: 1.1.5", "version: 9.9.9", 1)),
			keyring: f.alice.ArmoredPublicKeyring(), want: want{ReasonTampered, []string{`"9.9.9"`, `"1.1.5"`}}},
		{name: "tampered, signed files: is empty", archive: f.archive,
			prov:    signText(f.alice, strings.SplitAfter(message, "\n...\n")[0]+"files: {}\n"),
			keyring: f.alice.ArmoredPublicKeyring(), want: want{ReasonTampered, []string{"names no archive digest"}}},
		{name: "tampered, signed files: names only other archives", archive: f.archive,
			prov: signText(f.alice, strings.SplitAfter(message, "\n...\n")[0]+
				"files:\n  a-1.tgz: sha256:00\n  b-1.tgz: sha256:11\n"),
			keyring: f.alice.ArmoredPublicKeyring(), want: want{ReasonTampered, []string{"a-1.tgz, b-1.tgz", "fireworks-app-1.1.5.tgz"}}},
		{name: "tampered, garbage archive with a valid prov", archive: []byte("not a chart"), prov: f.prov,
			keyring: f.alice.ArmoredPublicKeyring(), want: want{ReasonTampered, []string{digestOf([]byte("not a chart"))}}},

		{name: "prov digest edited after signing", archive: f.other,
			prov:    bytes.Replace(f.prov, []byte(digestOf(f.archive)), []byte(digestOf(f.other)), 1),
			keyring: f.alice.ArmoredPublicKeyring(), want: want{ReasonWrongKey, []string{f.alice.SigningKeyID()}}},
		{name: "prov metadata edited after signing", archive: f.archive,
			prov:    bytes.Replace(f.prov, []byte("version: 1.1.5"), []byte("version: 1.1.7"), 1),
			keyring: f.alice.ArmoredPublicKeyring(), want: want{ReasonWrongKey, []string{f.alice.SigningKeyID(), "does not verify"}}},
		{name: "wrong key", archive: f.archive, prov: f.prov, keyring: f.bob.ArmoredPublicKeyring(),
			want: want{ReasonWrongKey, []string{f.alice.SigningKeyID(), f.alice.Fingerprint(), f.bob.Fingerprint()}}},
		{name: "wrong key, several in the keyring", archive: f.archive, prov: f.prov, keyring: signing.ArmoredKeyring(f.bob, expiredKey),
			want: want{ReasonWrongKey, []string{f.alice.SigningKeyID(), f.bob.Fingerprint(), expiredKey.Fingerprint()}}},

		{name: "key expired when it signed", archive: f.archive, prov: must(expiredKey.SignProvenance(f.archive)),
			keyring: expiredKey.ArmoredPublicKeyring(), want: want{ReasonExpired, []string{expiredKey.Fingerprint(), "expired on"}}},
		{name: "key compromised after signing", archive: f.archive, prov: compromisedProv,
			keyring: compromised.ArmoredPublicKeyring(), want: want{ReasonExpired, []string{"revoked", "compromised", "key leaked"}}},
		{name: "key retired before signing", archive: f.archive, prov: retiredAfter,
			keyring: retired.ArmoredPublicKeyring(), want: want{ReasonExpired, []string{"revoked", "retired"}}},
		{name: "signature expired", archive: f.archive,
			prov:    must(veteran.SignProvenanceWith(f.archive, signing.SignOptions{Time: now.Add(-2 * hour), Lifetime: hour})),
			keyring: veteran.ArmoredPublicKeyring(), want: want{ReasonExpired, []string{"signature", "expired on"}}},
		{name: "signature dated in the future", archive: f.archive,
			prov:    must(f.alice.SignProvenanceWith(f.archive, signing.SignOptions{Time: now.Add(hour)})),
			keyring: f.alice.ArmoredPublicKeyring(), want: want{ReasonExpired, []string{"in the future"}}},
		{name: "signature older than its key", archive: f.archive,
			prov:    must(f.alice.SignProvenanceWith(f.archive, signing.SignOptions{Time: now.Add(-24 * hour)})),
			keyring: f.alice.ArmoredPublicKeyring(), want: want{ReasonExpired, []string{"was created"}}},

		{name: "invalid, empty keyring", archive: f.archive, prov: f.prov, keyring: nil,
			want: want{ReasonInvalid, []string{"keyring", "empty"}}},
		{name: "invalid, blank keyring", archive: f.archive, prov: f.prov, keyring: []byte(" \n"),
			want: want{ReasonInvalid, []string{"keyring", "empty"}}},
		{name: "invalid, garbage keyring", archive: f.archive, prov: f.prov, keyring: []byte("not a keyring"),
			want: want{ReasonInvalid, []string{"keyring"}}},
		{name: "invalid, truncated binary keyring", archive: f.archive, prov: f.prov, keyring: f.alice.PublicKeyring()[:20],
			want: want{ReasonInvalid, []string{"keyring"}}},
		{name: "invalid, keyring is a signature", archive: f.archive, prov: f.prov,
			keyring: f.prov[bytes.Index(f.prov, []byte("-----BEGIN PGP SIGNATURE")):],
			want:    want{ReasonInvalid, []string{"keyring", `"PGP SIGNATURE"`}}},
		{name: "invalid, keyring is a GnuPG keybox", archive: f.archive, prov: f.prov,
			keyring: []byte("\x00\x00\x00\x20\x01\x01\x00\x02KBXf\x00\x00\x00\x00"),
			want:    want{ReasonInvalid, []string{"keybox"}}},
		{name: "invalid, keyring too big", archive: f.archive, prov: f.prov,
			keyring: append(f.alice.ArmoredPublicKeyring(), bytes.Repeat([]byte("\n"), MaxKeyringSize)...),
			want:    want{ReasonInvalid, []string{"keyring", "more than"}}},
		{name: "invalid, prov too big", archive: f.archive, prov: append(bytes.Clone(f.prov), bytes.Repeat([]byte("\n"), MaxProvenanceSize)...),
			keyring: f.alice.ArmoredPublicKeyring(), want: want{ReasonInvalid, []string{"provenance", "more than"}}},
		{name: "invalid, prov is not clear-signed", archive: f.archive, prov: []byte("files:\n  x.tgz: sha256:00\n"),
			keyring: f.alice.ArmoredPublicKeyring(), want: want{ReasonInvalid, []string{"clear-signed"}}},
		{name: "invalid, SHA-1 signature", archive: f.archive, prov: handSigned(f.alice, crypto.SHA1),
			keyring: f.alice.ArmoredPublicKeyring(), want: want{ReasonInvalid, []string{"broken hash SHA-1"}}},
		{name: "invalid, prov signs an empty text (panicked go-crypto before v1.5.2)", archive: f.archive, prov: []byte(emptySigned),
			keyring: f.alice.ArmoredPublicKeyring(), want: want{ReasonInvalid, []string{"signature"}}},
		{name: "invalid, keyring packet that panicked go-crypto's parser before v1.5.2", archive: f.archive, prov: f.prov,
			keyring: []byte(panickingPacket), want: want{ReasonInvalid, []string{"keyring"}}},
		{name: "invalid, prov signature packet that panicked go-crypto's parser before v1.5.2", archive: f.archive,
			prov:    clearSigned(message, []byte(panickingPacket)),
			keyring: f.alice.ArmoredPublicKeyring(), want: want{ReasonInvalid, []string{"provenance signature"}}},
		{name: "invalid, prov is a public key", archive: f.archive, prov: f.alice.ArmoredPublicKeyring(),
			keyring: f.alice.ArmoredPublicKeyring(), want: want{ReasonInvalid, []string{"clear-signed"}}},
		{name: "invalid, prov signature garbled", archive: f.archive,
			prov:    garbleSignature(f.prov),
			keyring: f.alice.ArmoredPublicKeyring(), want: want{ReasonInvalid, []string{"signature"}}},
		{name: "invalid, signed body is not YAML", archive: f.archive,
			prov:    signText(f.alice, "name: [\n...\nfiles: {\n"),
			keyring: f.alice.ArmoredPublicKeyring(), want: want{ReasonInvalid, []string{"provenance: message"}}},
		{name: "invalid, signed body has no files: document", archive: f.archive,
			prov:    signText(f.alice, "just some text\n"),
			keyring: f.alice.ArmoredPublicKeyring(), want: want{ReasonInvalid, []string{"provenance: message"}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			id, err := verifyProvenanceAt(now, c.archive, c.prov, c.keyring)
			if c.want.reason == "" {
				if err != nil {
					t.Fatalf("VerifyProvenance: %v", err)
				}
				if id.Method != MethodProvenance || id.Digest != digestOf(c.archive) {
					t.Errorf("identity = %+v, want method %s and digest %s", id, MethodProvenance, digestOf(c.archive))
				}
				return
			}
			if err == nil {
				t.Fatalf("VerifyProvenance accepted: %+v; want %s", id, c.want.reason)
			}
			t.Log(err)
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("error %v (%T) is not an *Error", err, err)
			}
			if got := ReasonOf(err); got != c.want.reason {
				t.Errorf("reason = %s, want %s (%v)", got, c.want.reason, err)
			}
			for _, s := range c.want.contains {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not name %q", err, s)
				}
			}
			if id != (Identity{}) {
				t.Errorf("refusal returned identity %+v", id)
			}
		})
	}

	t.Run("identity", func(t *testing.T) {
		id, err := VerifyProvenance(f.archive, f.prov, signing.ArmoredKeyring(f.bob, f.alice))
		if err != nil {
			t.Fatal(err)
		}
		want := Identity{
			Method:         MethodProvenance,
			Digest:         digestOf(f.archive),
			KeyFingerprint: f.alice.Fingerprint(),
			Signer:         "Alice Publisher (charts) <alice@example.com>",
			SignedAt:       id.SignedAt,
		}
		if id != want {
			t.Errorf("identity = %+v, want %+v", id, want)
		}
		if len(id.KeyFingerprint) != 40 || strings.ToUpper(id.KeyFingerprint) != id.KeyFingerprint {
			t.Errorf("fingerprint %q is not 40 upper-case hex digits", id.KeyFingerprint)
		}
		if d := time.Since(id.SignedAt); d < 0 || d > time.Minute || id.SignedAt.Location() != time.UTC {
			t.Errorf("SignedAt = %v, want the signing time, a moment ago, in UTC", id.SignedAt)
		}
	})

	t.Run("identity, signed by a subkey", func(t *testing.T) {
		prov := must(subkeyed.SignProvenance(f.archive))
		id, err := VerifyProvenance(f.archive, prov, subkeyed.ArmoredPublicKeyring())
		if err != nil {
			t.Fatal(err)
		}
		if id.KeyFingerprint != subkeyed.Fingerprint() || id.Signer != subkeyed.Identity() {
			t.Errorf("identity = %+v, want the primary key %s of %q", id, subkeyed.Fingerprint(), subkeyed.Identity())
		}
		if strings.HasSuffix(subkeyed.Fingerprint(), subkeyed.SigningKeyID()) {
			t.Errorf("the subkey %s did not sign: the primary key did", subkeyed.SigningKeyID())
		}
	})

	t.Run("identity, signing time", func(t *testing.T) {
		at := now.Add(-36 * hour).Truncate(time.Second)
		id, err := VerifyProvenance(f.archive,
			must(expiresLater.SignProvenanceWith(f.archive, signing.SignOptions{Time: at})),
			expiresLater.ArmoredPublicKeyring())
		if err != nil {
			t.Fatal(err)
		}
		if !id.SignedAt.Equal(at) {
			t.Errorf("SignedAt = %v, want %v", id.SignedAt, at)
		}
	})
}

// emptySigned is a clear-signed message with no text, which makes go-crypto's
// clearsign.Decode panic.
const emptySigned = "-----BEGIN PGP SIGNED MESSAGE-----\n\n-----BEGIN PGP SIGNATURE-----\n\n-----END PGP SIGNATURE-----\n"

// panickingPacket is a signature packet with an empty exportable-certification
// subpacket, which go-crypto v1.4.1 indexes without a length check (found by
// FuzzVerifyProvenance).
const panickingPacket = "\xc2\xc00\x040\x16\n\x00\x06\x01\x040000"

// clearSigned is a clear-signed message of text whose signature block holds packets.
func clearSigned(text string, packets []byte) []byte {
	var b bytes.Buffer
	b.WriteString("-----BEGIN PGP SIGNED MESSAGE-----\n\n")
	for line := range strings.Lines(text + "\n") {
		if strings.HasPrefix(line, "-") {
			b.WriteString("- ") // dash-escaped, as RFC 9580 section 7.1 has it
		}
		b.WriteString(line)
	}
	w := must(armor.Encode(&b, openpgp.SignatureType, nil))
	must(w.Write(packets))
	if err := w.Close(); err != nil {
		panic(err)
	}
	b.WriteString("\n")
	return b.Bytes()
}

// garbleSignature replaces the base64 of prov's signature with other valid base64.
func garbleSignature(prov []byte) []byte {
	start := bytes.Index(prov, []byte("-----BEGIN PGP SIGNATURE-----"))
	end := bytes.Index(prov, []byte("-----END PGP SIGNATURE-----"))
	return bytes.Join([][]byte{prov[:start], []byte("-----BEGIN PGP SIGNATURE-----\n\nAAAAAAAAAAAAAAAA\n"), prov[end:]}, nil)
}

// TestHelmSignatoryInterop checks the formats both ways: Helm's own ClearSign is
// accepted, and test/signing's provenance is what Helm makes and verifies.
func TestHelmSignatoryInterop(t *testing.T) {
	f := newFixture(t)
	ch := must(samplecharts.Load("1.1.5"))
	meta := must(yaml.Marshal(ch.Metadata))

	helm := &provenance.Signatory{Entity: f.alice.Entity()}
	prov := must(helm.ClearSign(f.archive, "fireworks-app-1.1.5.tgz", meta))
	id, err := VerifyProvenance(f.archive, []byte(prov), f.alice.ArmoredPublicKeyring())
	if err != nil {
		t.Fatalf("Helm's provenance refused: %v", err)
	}
	if id.KeyFingerprint != f.alice.Fingerprint() {
		t.Errorf("fingerprint = %s, want %s", id.KeyFingerprint, f.alice.Fingerprint())
	}
	if _, err := VerifyProvenance(f.other, []byte(prov), f.alice.ArmoredPublicKeyring()); ReasonOf(err) != ReasonTampered {
		t.Errorf("Helm's provenance over another archive: %v, want %s", err, ReasonTampered)
	}

	// The message test/signing signs is the one Helm signs.
	helmBlock, _ := clearsign.Decode([]byte(prov))
	ours := must(f.alice.SignProvenanceWith(f.archive, signing.SignOptions{}))
	oursBlock, _ := clearsign.Decode(ours)
	if helmBlock == nil || oursBlock == nil {
		t.Fatal("provenance is not clear-signed")
	}
	if !bytes.Equal(helmBlock.Plaintext, oursBlock.Plaintext) {
		t.Errorf("signed text differs from Helm's:\n%s\nHelm:\n%s", oursBlock.Plaintext, helmBlock.Plaintext)
	}
	if msg := must(signing.ProvenanceMessage(f.archive, "")); !bytes.Equal(bytes.TrimRight(msg, "\n"), bytes.TrimRight(helmBlock.Plaintext, "\n")) {
		t.Errorf("ProvenanceMessage differs from Helm's signed text:\n%s\nHelm:\n%s", msg, helmBlock.Plaintext)
	}

	// Helm's verifier (what `helm verify` runs) accepts test/signing's provenance.
	verifier := &provenance.Signatory{KeyRing: must(openpgp.ReadArmoredKeyRing(bytes.NewReader(f.alice.ArmoredPublicKeyring())))}
	for name, p := range map[string][]byte{"SignProvenance": f.prov, "SignProvenanceWith": ours} {
		if _, err := verifier.Verify(f.archive, p, "fireworks-app-1.1.5.tgz"); err != nil {
			t.Errorf("Helm refuses %s's provenance: %v", name, err)
		}
	}
}

// FuzzVerifyProvenance checks that no input panics and that whatever is accepted is
// accepted for the archive given. Its seeds are a small chart's, to keep inputs short.
// Minimizing each new input runs thousands of verifications, which can eat a short run:
//
//	go test -run '^$' -fuzz FuzzVerifyProvenance -fuzztime 30s -fuzzminimizetime 5s ./chartverify/
func FuzzVerifyProvenance(f *testing.F) {
	tiny := &chart.Chart{
		Metadata: &chart.Metadata{APIVersion: chart.APIVersionV2, Name: "tiny", Version: "0.1.0"},
		Templates: []*common.File{{Name: "templates/cm.yaml",
			Data: []byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}\n")}},
	}
	dir := f.TempDir()
	archive := must(os.ReadFile(must(chartutil.Save(tiny, dir))))
	other := bytes.Replace(archive, []byte{0}, []byte{1}, 1)
	alice := newKey(f, "Alice Publisher", signing.PGPKeyOptions{})
	bob := newKey(f, "Bob Other", signing.PGPKeyOptions{})
	prov := must(alice.SignProvenance(archive))
	ring := alice.ArmoredPublicKeyring()

	f.Add(archive, prov, ring)
	f.Add(archive, prov, alice.PublicKeyring())
	f.Add(archive, prov, signing.ArmoredKeyring(bob, alice))
	f.Add(other, prov, ring)
	f.Add(archive, prov, bob.ArmoredPublicKeyring())
	f.Add([]byte{}, []byte{}, []byte{})
	f.Add([]byte("x"), []byte(emptySigned), ring)
	f.Add([]byte("0"), []byte("0"), []byte(panickingPacket))
	f.Add(archive, clearSigned("files: {}", []byte(panickingPacket)), ring)
	f.Fuzz(func(t *testing.T, archive, prov, keyring []byte) {
		id, err := VerifyProvenance(archive, prov, keyring)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("error %v (%T) is not an *Error", err, err)
			}
			return
		}
		if id.Digest != digestOf(archive) {
			t.Fatalf("accepted with digest %s, archive is %s", id.Digest, digestOf(archive))
		}
		if id.Method != MethodProvenance || id.KeyFingerprint == "" {
			t.Fatalf("accepted with identity %+v", id)
		}
	})
}

// TestFixtureArchives checks the test's own archives differ as the cases assume.
func TestFixtureArchives(t *testing.T) {
	f := newFixture(t)
	if bytes.Equal(f.archive, f.other) || bytes.Equal(f.archive, f.nextVersion) {
		t.Fatal("the fixture's archives are not different archives")
	}
}
