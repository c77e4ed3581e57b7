package chartverify_test

import (
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/compositor-dev/compositor/chartverify"
)

// TestKeylessIdentityBounded: spec.chart.verify.cosign.keyless.subjectRegExp is
// compiled on every verification, and regexp/syntax's own size check lets 21 KB of
// "a{1000}" compile to some three million instructions: about a second of CPU and
// hundreds of MiB of heap per reconciliation, in a controller whose chart sets a
// 512Mi memory limit, from any tenant that may write a definition. The expression,
// the issuer and the subject are bounded before anything is compiled.
func TestKeylessIdentityBounded(t *testing.T) {
	kl := newKeyless(t)
	refused := func(t *testing.T, k chartverify.Keyless, want ...string) {
		t.Helper()
		k.TrustedRoot = kl.root
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		start := time.Now()
		_, err := chartverify.VerifyBlobBundle([]byte("archive"), []byte("{}"), chartverify.CosignPolicy{Keyless: &k})
		took := time.Since(start)
		runtime.ReadMemStats(&after)
		allocated := (after.TotalAlloc - before.TotalAlloc) >> 20
		t.Logf("%s, %d MiB allocated, refusal: %.200v", took, allocated, err)
		require.False(t, allocated > 64 || took > time.Second/2, "the policy cost %s and %d MiB to refuse", took, allocated)
		requireRefused(t, err, chartverify.ReasonInvalid, want...)
	}

	t.Run("a long subjectRegExp", func(t *testing.T) {
		refused(t, chartverify.Keyless{Issuer: ciIssuer, SubjectRegExp: strings.Repeat("a{1000}", 3000)}, "subjectRegExp", "21000 bytes", "512")
	})
	t.Run("a short subjectRegExp of a large program", func(t *testing.T) {
		re := strings.Repeat("a{1000}", 512/len("a{1000}")) // 73,000 instructions
		refused(t, chartverify.Keyless{Issuer: ciIssuer, SubjectRegExp: re}, "subjectRegExp", "instructions", "10000")
	})
	t.Run("a long issuer", func(t *testing.T) {
		refused(t, chartverify.Keyless{Issuer: "https://" + strings.Repeat("i", 600), Subject: ciSubject}, "issuer", "512")
	})
	t.Run("a long subject", func(t *testing.T) {
		refused(t, chartverify.Keyless{Issuer: ciIssuer, Subject: strings.Repeat("s", 600) + "@example.test"}, "subject", "512")
	})
	t.Run("a subject expression as written", func(t *testing.T) {
		p := kl.policy()
		p.Keyless.Subject, p.Keyless.SubjectRegExp = "", `(release|publish)@charts\.example\.test|[a-z0-9-]{1,63}@ci\.example\.test`
		_, err := chartverify.VerifyBlobBundle([]byte("archive"), []byte("{}"), p)
		requireRefused(t, err, chartverify.ReasonInvalid, "not a Sigstore bundle") // the policy itself is read
	})
}

// TestCosignMaterialRefusalsQuoteNoSecret: the trusted root and the public key are a
// Secret's value, and a refusal becomes the definition's Synced message and a Warning
// event, which whoever may read definitions or events of the namespace reads (the
// built-in view role among them), without any right on Secrets. protojson quoted the
// token it choked on (up to 32 characters of [-+._a-zA-Z0-9]: a password or an API
// key whole, the first 32 characters of a service account's JWT), sigstore-go the
// media type, a PEM parser the block's type.
func TestCosignMaterialRefusalsQuoteNoSecret(t *testing.T) {
	const token = "Tr0ub4dor-Horse.Battery_9" // e.g. the password key of a database Secret
	const mediaType = `"mediaType":"application/vnd.dev.sigstore.trustedroot+json;version=0.1"`
	for name, root := range map[string]string{
		"the token":                         token,
		"the token, quoted":                 `"` + token + `"`,
		"a JSON object":                     `{"password":"` + token + `"}`,
		"a field named by it":               `{"` + token + `":1}`,
		"a media type":                      `{"mediaType":"` + token + `"}`,
		"a value of the wrong type":         `{` + mediaType + `,"tlogs":"` + token + `"}`,
		"a transparency log's key":          `{` + mediaType + `,"tlogs":[{"baseUrl":"https://` + token + `","hashAlgorithm":"SHA2_256","publicKey":{"rawBytes":"` + "AAAA" + `","keyDetails":"PKIX_ECDSA_P256_SHA_256"},"logId":{"keyId":"AAAA"}}]}`,
		"a certificate authority's subject": `{` + mediaType + `,"certificateAuthorities":[{"subject":{"organization":"` + token + `"},"uri":"https://` + token + `","certChain":{"certificates":[{"rawBytes":"AAAA"}]}}]}`,
	} {
		t.Run("trusted root, "+name, func(t *testing.T) {
			_, err := chartverify.VerifyBlobBundle([]byte("archive"), []byte("{}"), chartverify.CosignPolicy{Keyless: &chartverify.Keyless{
				Issuer: ciIssuer, Subject: ciSubject, TrustedRoot: []byte(root),
			}})
			requireRefused(t, err, chartverify.ReasonInvalid, "trusted root")
			t.Log(err)
			require.NotContains(t, err.Error(), token, "the refusal, which the definition's status and events carry, holds the Secret's value")
		})
	}
	for name, key := range map[string]string{
		"the token":                token,
		"a PEM block named by it":  "-----BEGIN " + strings.ToUpper(token) + "-----\nAAAA\n-----END " + strings.ToUpper(token) + "-----\n",
		"a PUBLIC KEY that is not": "-----BEGIN PUBLIC KEY-----\n" + token + "\n-----END PUBLIC KEY-----\n",
	} {
		t.Run("public key, "+name, func(t *testing.T) {
			_, err := chartverify.VerifyBlobBundle([]byte("archive"), []byte("{}"), chartverify.CosignPolicy{PublicKey: []byte(key)})
			requireRefused(t, err, chartverify.ReasonInvalid, "public key")
			t.Log(err)
			require.NotContains(t, strings.ToUpper(err.Error()), strings.ToUpper(token))
		})
	}
}
