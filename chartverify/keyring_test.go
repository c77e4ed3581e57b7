package chartverify

import (
	"bytes"
	"crypto/dsa" //nolint:staticcheck // the costly keys are DSA keys, which go-crypto still verifies
	"crypto/rand"
	"crypto/rsa"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/ProtonMail/go-crypto/openpgp/armor"
	"github.com/ProtonMail/go-crypto/openpgp/clearsign"
	"github.com/ProtonMail/go-crypto/openpgp/packet"
	"helm.sh/helm/v4/pkg/provenance"
	"sigs.k8s.io/yaml"

	"github.com/compositor-dev/compositor/test/samplecharts"
	"github.com/compositor-dev/compositor/test/signing"
)

// mpi is an OpenPGP multiprecision integer: its bit length, then its bytes.
func mpi(n *big.Int) []byte {
	b := n.Bytes()
	return append([]byte{byte(n.BitLen() >> 8), byte(n.BitLen())}, b...)
}

// newFormatPacket frames body as a new-format OpenPGP packet of tag.
func newFormatPacket(tag byte, body []byte) []byte {
	out := []byte{0xC0 | tag, 0xFF, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(out[2:], uint32(len(body)))
	return append(out, body...)
}

// packetBody is the body of the single packet serialize writes.
func packetBody(t testing.TB, serialize func(io.Writer) error) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := serialize(&b); err != nil {
		t.Fatal(err)
	}
	op, err := packet.NewOpaqueReader(&b).Next()
	if err != nil {
		t.Fatal(err)
	}
	return op.Contents
}

// hugeDSAKey is a DSA public key with p and q of bits bits (65528 is the largest an
// MPI's 16-bit length allows with q a multiple of 8 bits, as crypto/dsa wants) and
// g = y = p-1.
func hugeDSAKey(t testing.TB, bits int) *packet.PublicKey {
	t.Helper()
	random := func() *big.Int {
		n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), uint(bits)))
		if err != nil {
			t.Fatal(err)
		}
		n.SetBit(n, bits-1, 1) // exactly bits long
		n.SetBit(n, 0, 1)      // odd: Montgomery, and s = 2 invertible mod q
		return n
	}
	p, q := random(), random()
	pMinus1 := new(big.Int).Sub(p, big.NewInt(1))
	return packet.NewDSAPublicKey(time.Unix(1700000000, 0), &dsa.PublicKey{
		Parameters: dsa.Parameters{P: p, Q: q, G: pMinus1},
		Y:          pMinus1,
	})
}

// hugeDSAKeyring is a binary keyring of one DSA key of bits bits (hugeDSAKey), a user
// ID and a self-signature r = 1, s = 2 that names the key as its issuer. Reading it
// makes go-crypto check the self-signature: at 65528 bits, two modular
// exponentiations of over a minute each, for some 33 KB.
func hugeDSAKeyring(t testing.TB, bits int) []byte {
	t.Helper()
	pub := hugeDSAKey(t, bits)
	var ring bytes.Buffer
	if err := pub.Serialize(&ring); err != nil {
		t.Fatal(err)
	}
	if err := packet.NewUserId("Mallory", "", "mallory@example.com").Serialize(&ring); err != nil {
		t.Fatal(err)
	}
	ring.Write(selfCertification(pub))
	return ring.Bytes()
}

// selfCertification is a v4 positive certification packet naming pub as its issuer,
// r = 1, s = 2. go-crypto checks no hash tag for v4 signatures, so nothing has to be
// computed to get to the exponentiations.
func selfCertification(pub *packet.PublicKey) []byte {
	hashed := []byte{5, 2, 0x65, 0x53, 0xf1, 0x00} // creation time
	hashed = append(hashed, 22, 33, 4)             // issuer fingerprint
	hashed = append(hashed, pub.Fingerprint...)
	unhashed := append([]byte{9, 16}, binary.BigEndian.AppendUint64(nil, pub.KeyId)...) // issuer key ID
	sig := []byte{4, byte(packet.SigTypePositiveCert), byte(packet.PubKeyAlgoDSA), 8 /* SHA256 */}
	sig = binary.BigEndian.AppendUint16(sig, uint16(len(hashed)))
	sig = append(sig, hashed...)
	sig = binary.BigEndian.AppendUint16(sig, uint16(len(unhashed)))
	sig = append(sig, unhashed...)
	sig = append(sig, 0, 0) // hash tag, unchecked for v4
	sig = append(sig, mpi(big.NewInt(1))...)
	sig = append(sig, mpi(big.NewInt(2))...)
	return newFormatPacket(2, sig)
}

func armored(t testing.TB, blockType string, binary []byte) []byte {
	t.Helper()
	var b bytes.Buffer
	w, err := armor.Encode(&b, blockType, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(binary); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	b.WriteByte('\n')
	return b.Bytes()
}

// refusedPromptly runs VerifyProvenance with keyring, which must be refused as
// ReasonInvalid within a bound, naming want.
func refusedPromptly(t *testing.T, keyring []byte, want ...string) {
	t.Helper()
	done := make(chan error, 1)
	start := time.Now()
	go func() {
		_, err := VerifyProvenance([]byte("archive"), []byte("no prov"), keyring)
		done <- err
	}()
	select {
	case err := <-done:
		t.Logf("%d-byte keyring refused in %s: %v", len(keyring), time.Since(start), err)
		if ReasonOf(err) != ReasonInvalid || !strings.Contains(err.Error(), "keyring") {
			t.Fatalf("refusal = %v, want %s naming the keyring", err, ReasonInvalid)
		}
		for _, w := range want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("refusal %q does not name %q", err, w)
			}
		}
	case <-time.After(5 * time.Second):
		// The goroutine goes on burning a core until the test binary exits.
		t.Fatalf("VerifyProvenance has not returned after %s on a %d-byte keyring: a tenant's keyring Secret stalls the definition reconciler",
			time.Since(start), len(keyring))
	}
}

// TestKeyringKeySizeBounded: VerifyProvenance reads the keyring first, before it
// looks at the .prov, and go-crypto checks each key's self-signatures as it reads it,
// without a bound on the key's parameters or a context to cancel. A keyring of ~33 KB
// (a Secret holds 1 MiB, i.e. some 30 such keys, each checked in turn since go-crypto
// skips a key whose self-signature fails and reads on) would keep the definition
// reconciler's worker busy for minutes per key on every reconciliation. The keyring's
// packets are vetted first, so a key larger than the bounds is refused at once,
// however it is packaged.
func TestKeyringKeySizeBounded(t *testing.T) {
	// At 4096 bits the self-signature does not check and the ring holds no key;
	// what the size changes is the time go-crypto takes to find that out.
	refusedPromptly(t, hugeDSAKeyring(t, 4096), "DSA with a 4096-bit p", "3072")

	huge := hugeDSAKeyring(t, 65528)
	honest := newKey(t, "Alice Publisher", signing.PGPKeyOptions{})

	t.Run("binary", func(t *testing.T) {
		refusedPromptly(t, huge, "DSA with a 65528-bit p and a 65528-bit q", "3072 and 256 bits")
	})
	t.Run("armored, after an honest key's block", func(t *testing.T) {
		ring := append(honest.ArmoredPublicKeyring(), armored(t, openpgp.PublicKeyType, huge)...)
		refusedPromptly(t, ring, "armored block 2", "65528-bit p")
	})
	t.Run("a subkey of an honest key", func(t *testing.T) {
		sub := hugeDSAKey(t, 65528)
		sub.IsSubkey = true
		var ring bytes.Buffer
		ring.Write(honest.PublicKeyring())
		if err := sub.Serialize(&ring); err != nil {
			t.Fatal(err)
		}
		refusedPromptly(t, ring.Bytes(), "subkey "+fingerprint(sub.Fingerprint)+" of key "+honest.Fingerprint())
	})
	t.Run("RSA", func(t *testing.T) {
		n := new(big.Int).Lsh(big.NewInt(1), 16383)
		n.SetBit(n, 0, 1)
		pub := packet.NewRSAPublicKey(time.Unix(1700000000, 0), &rsa.PublicKey{N: n, E: 65537})
		var ring bytes.Buffer
		if err := pub.Serialize(&ring); err != nil {
			t.Fatal(err)
		}
		refusedPromptly(t, ring.Bytes(), "RSA with a 16384-bit modulus", "8192")
	})
	t.Run("a secret key", func(t *testing.T) {
		// go-crypto validates an unencrypted secret key as it parses it: g^q mod p
		// with the huge parameters, before any signature.
		body := packetBody(t, hugeDSAKey(t, 65528).Serialize)
		body = append(body, 0) // S2K usage: unencrypted
		body = append(body, mpi(big.NewInt(3))...)
		body = append(body, 0, 0) // checksum
		secret := newFormatPacket(5, body)
		refusedPromptly(t, secret, "secret key")
		refusedPromptly(t, armored(t, openpgp.PrivateKeyType, secret), "public keys only")
	})
	t.Run("hidden in an honest key packet's tail", func(t *testing.T) {
		// go-crypto parses a public key packet without reading it to its end, and
		// reads what is left as the next packets.
		body := append(packetBody(t, honest.Entity().PrimaryKey.Serialize), huge...)
		ring := append(newFormatPacket(6, body), honest.PublicKeyring()...)
		refusedPromptly(t, ring, "bytes after what it holds")
	})
	t.Run("in a compressed packet", func(t *testing.T) {
		// Stored uncompressed: go-crypto reads a compressed packet's contents lazily,
		// as the keyring's next packets.
		ring := append(newFormatPacket(8, append([]byte{0}, huge...)), honest.PublicKeyring()...)
		refusedPromptly(t, ring, "type 8")
	})
	t.Run("an algorithm go-crypto cannot read", func(t *testing.T) {
		body := []byte{4, 0x65, 0x53, 0xf1, 0x00, 100} // experimental algorithm 100
		body = append(body, mpi(new(big.Int).Lsh(big.NewInt(1), 65000))...)
		ring := append(honest.PublicKeyring(), newFormatPacket(6, body)...)
		refusedPromptly(t, ring, "algorithm 100", "4096")

		// A small one is skipped, as go-crypto skips it.
		small := append(honest.PublicKeyring(), newFormatPacket(6, body[:6+2+8])...)
		if _, err := readKeyring(small); err != nil {
			t.Errorf("an honest keyring with a small key of an unknown algorithm: %v", err)
		}
	})
}

// TestKeyringCountsBounded: the keys, the packets and the signatures go-crypto checks
// as it reads a keyring are bounded, the third-party certifications an honest key
// collects (which go-crypto keeps unchecked) only by the packets.
func TestKeyringCountsBounded(t *testing.T) {
	honest := newKey(t, "Alice Publisher", signing.PGPKeyOptions{})
	t.Run("keys", func(t *testing.T) {
		refusedPromptly(t, bytes.Repeat(honest.PublicKeyring(), maxKeyringKeys+1), fmt.Sprint("more than ", maxKeyringKeys, " keys"))
		if _, err := readKeyring(bytes.Repeat(honest.PublicKeyring(), maxKeyringKeys)); err != nil {
			t.Errorf("%d keys: %v", maxKeyringKeys, err)
		}
	})
	t.Run("packets", func(t *testing.T) {
		marker := newFormatPacket(10, []byte("PGP"))
		refusedPromptly(t, append(bytes.Repeat(marker, maxKeyringPackets), honest.PublicKeyring()...), fmt.Sprint("more than ", maxKeyringPackets))
	})

	entity := func(t *testing.T) (*openpgp.Entity, *openpgp.Identity) {
		e, err := openpgp.NewEntity("Carol Certified", "", "carol@example.com", nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range e.Identities {
			return e, id
		}
		panic("no identity")
	}
	serialize := func(t *testing.T, e *openpgp.Entity) []byte {
		var b bytes.Buffer
		if err := e.Serialize(&b); err != nil {
			t.Fatal(err)
		}
		return b.Bytes()
	}
	t.Run("self-signatures", func(t *testing.T) {
		e, id := entity(t)
		for range maxKeyringCheckedSignatures {
			id.Signatures = append(id.Signatures, id.SelfSignature)
		}
		refusedPromptly(t, serialize(t, e), fmt.Sprint("more than ", maxKeyringCheckedSignatures, " self-signatures"))
	})
	t.Run("third-party certifications", func(t *testing.T) {
		e, id := entity(t)
		if err := e.SignIdentity(id.Name, newKey(t, "Bob Certifier", signing.PGPKeyOptions{}).Entity(), &packet.Config{}); err != nil {
			t.Fatal(err)
		}
		cert := id.Signatures[len(id.Signatures)-1]
		for range 2 * maxKeyringCheckedSignatures {
			id.Signatures = append(id.Signatures, cert)
		}
		ring, err := readKeyring(serialize(t, e))
		if err != nil || len(ring) != 1 {
			t.Fatalf("a key with %d third-party certifications: %d keys, %v", 2*maxKeyringCheckedSignatures, len(ring), err)
		}
	})
}

// TestKeyringHonestAlgorithms: the keys publishers sign charts with (EdDSA, Ed25519,
// NIST curves, RSA up to 4096 bits) pass the vetting and verify Helm's provenance.
func TestKeyringHonestAlgorithms(t *testing.T) {
	f := newFixture(t)
	meta := must(yaml.Marshal(must(samplecharts.Load("1.1.5")).Metadata))
	for name, cfg := range map[string]*packet.Config{
		"EdDSA (legacy)":         {Algorithm: packet.PubKeyAlgoEdDSA},
		"Ed25519":                {Algorithm: packet.PubKeyAlgoEd25519},
		"Ed25519, a v6 key":      {Algorithm: packet.PubKeyAlgoEd25519, V6Keys: true},
		"ECDSA P-256":            {Algorithm: packet.PubKeyAlgoECDSA, Curve: packet.CurveNistP256},
		"RSA 2048":               {Algorithm: packet.PubKeyAlgoRSA, RSABits: 2048},
		"RSA 4096 (GnuPG's max)": {Algorithm: packet.PubKeyAlgoRSA, RSABits: 4096},
	} {
		t.Run(name, func(t *testing.T) {
			e, err := openpgp.NewEntity("Pat Publisher", "", "pat@example.com", cfg)
			if err != nil {
				t.Fatal(err)
			}
			var ring bytes.Buffer
			if err := e.Serialize(&ring); err != nil {
				t.Fatal(err)
			}
			prov, err := (&provenance.Signatory{Entity: e}).ClearSign(f.archive, "fireworks-app-1.1.5.tgz", meta)
			if err != nil {
				t.Fatal(err)
			}
			for _, keyring := range [][]byte{ring.Bytes(), armored(t, openpgp.PublicKeyType, ring.Bytes())} {
				id, err := VerifyProvenance(f.archive, []byte(prov), keyring)
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				if id.KeyFingerprint != fingerprint(e.PrimaryKey.Fingerprint) {
					t.Errorf("fingerprint = %s, want %s", id.KeyFingerprint, fingerprint(e.PrimaryKey.Fingerprint))
				}
			}
		})
	}
}

// TestKeyringRefusalsQuoteNoSecret: a keyring is a Secret's value, and a refusal
// becomes the definition's status and events, which whoever may read the namespace's
// definitions reads. A keyringRef naming another Secret (a password, a token) must not
// copy it there.
func TestKeyringRefusalsQuoteNoSecret(t *testing.T) {
	const token = "Tr0ub4dor-Horse.Battery_9"
	// An ECDSA key whose curve OID is the token: go-crypto's error quotes the OID in hex.
	oidKey := []byte{4, 0x65, 0x53, 0xf1, 0x00, byte(packet.PubKeyAlgoECDSA), byte(len(token))}
	oidKey = append(oidKey, token...)
	oidKey = append(oidKey, mpi(big.NewInt(4))...)
	for name, keyring := range map[string][]byte{
		"the token":                       []byte(token),
		"the token after a binary header": append([]byte{0x99, 0x00, byte(len(token))}, token...),
		"an armored block named by it":    []byte("-----BEGIN PGP " + token + "-----\n\nAAAA\n-----END PGP " + token + "-----\n"),
		"a key whose curve it names":      newFormatPacket(6, oidKey),
	} {
		t.Run(name, func(t *testing.T) {
			_, err := VerifyProvenance([]byte("archive"), []byte("no prov"), keyring)
			if ReasonOf(err) != ReasonInvalid {
				t.Fatalf("refusal = %v, want %s", err, ReasonInvalid)
			}
			t.Log(err)
			// 'T' is 84: go-crypto reads the token's first byte as a key version.
			for _, leak := range []string{token, hex.EncodeToString([]byte(token))[:8], "84"} {
				if strings.Contains(err.Error(), leak) {
					t.Fatalf("the refusal quotes the Secret's value: %v", err)
				}
			}
		})
	}
}

// TestProvenanceSignatureBlockBounded: a .prov's signature block holds one signature
// as Helm writes it; one of many, each named in a refusal, is refused.
func TestProvenanceSignatureBlockBounded(t *testing.T) {
	f := newFixture(t)
	block, _ := clearsign.Decode(f.prov)
	sig := must(io.ReadAll(block.ArmoredSignature.Body))
	prov := clearSigned(string(block.Plaintext), bytes.Repeat(sig, maxProvenanceSignatures+1))
	_, err := VerifyProvenance(f.archive, prov, f.alice.ArmoredPublicKeyring())
	if ReasonOf(err) != ReasonInvalid || !strings.Contains(err.Error(), fmt.Sprint("more than ", maxProvenanceSignatures, " signatures")) {
		t.Fatalf("%d signatures: %v", maxProvenanceSignatures+1, err)
	}
}
