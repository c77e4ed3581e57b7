package chartverify_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/compositor-dev/compositor/chartfetch"
	"github.com/compositor-dev/compositor/chartverify"
	"github.com/compositor-dev/compositor/test/signing"
)

// subjects is n digests of nothing in particular.
func subjects(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = digestOfBytes(fmt.Appendf(nil, "subject %d", i))
	}
	return out
}

// withinBound runs verify, which must return within bound, and returns its error.
func withinBound(t *testing.T, bound time.Duration, what string, verify func() error) error {
	t.Helper()
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- verify() }()
	select {
	case err := <-done:
		took := time.Since(start)
		t.Logf("%s refused in %s: %.300v", what, took, err)
		if took > bound {
			t.Fatalf("%s took %s to refuse, more than %s", what, took, bound)
		}
		return err
	case <-time.After(20 * time.Second):
		t.Fatalf("%s is still being refused after %s", what, time.Since(start))
		return nil
	}
}

// TestStatementSubjectsCheckedOnce: a bundle that does not verify is diagnosed, and
// the diagnosis used to run a whole sigstore-go verification per sha256 subject the
// (unverified) statement names: whoever may push to the chart's OCI repository,
// without any signing key, could attach MaxSignatureArtifacts bundles of thousands of
// subjects as referrers of the chart's manifest, and every reconciliation of every
// definition verifying that chart spent minutes on them on the single definition
// worker (5,000 subjects, ~670 KB, took 13.5 s). The envelope's signature is now
// checked once, and its subjects read only when it holds.
func TestStatementSubjectsCheckedOnce(t *testing.T) {
	attacker := newECDSASigner(t)
	key, err := signing.NewCosignKey()
	require.NoError(t, err)
	flood := attacker.statementBundle(t, signing.CosignStatementPredicate, subjects(2000)...)
	require.LessOrEqual(t, len(flood), chartfetch.MaxSignatureBytes, "the bundle is over what is fetched")

	t.Run("a bundle by another key", func(t *testing.T) {
		err := withinBound(t, time.Second, fmt.Sprintf("a %d-byte bundle", len(flood)), func() error {
			_, err := chartverify.VerifyBlobBundle([]byte("the chart archive"), flood, chartverify.CosignPolicy{PublicKey: key.PublicKeyPEM()})
			return err
		})
		requireRefused(t, err, chartverify.ReasonWrongKey)
	})
	t.Run("a genuine statement of other subjects", func(t *testing.T) {
		// The key's own signature of 2,000 other artifacts: checked once, then the
		// subjects are read to name one.
		others := subjects(2000)
		err := withinBound(t, time.Second, "a genuine statement", func() error {
			_, err := chartverify.VerifyBlobBundle([]byte("the chart archive"), attacker.statementBundle(t, signing.CosignStatementPredicate, others...), attacker.policy)
			return err
		})
		requireRefused(t, err, chartverify.ReasonTampered, others[0])
	})
	t.Run("more bundles than are fetched", func(t *testing.T) {
		// VerifyOCI examines no more bundles than chartfetch fetches, whoever calls it.
		archiveDigest := digestOfBytes([]byte("the chart archive"))
		manifestDigest, manifest := chartManifest(t, archiveDigest)
		sigs := &chartfetch.Signatures{ManifestDigest: manifestDigest, Manifest: manifest}
		for range chartfetch.MaxSignatureArtifacts + 4 {
			sigs.Bundles = append(sigs.Bundles, flood)
		}
		err := withinBound(t, 3*time.Second, fmt.Sprintf("%d such bundles", len(sigs.Bundles)), func() error {
			_, err := chartverify.VerifyOCI(archiveDigest, sigs, chartverify.CosignPolicy{PublicKey: key.PublicKeyPEM()})
			return err
		})
		requireRefused(t, err, chartverify.ReasonWrongKey, "4 more bundles", "not examined")
	})
}
