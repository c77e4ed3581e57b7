package certs

import (
	"crypto/x509"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
)

// bundleOf returns the CAs of a bundle, in order.
func bundleOf(t *testing.T, bundle []byte) []*x509.Certificate {
	t.Helper()
	certs, err := parseCertificates(bundle)
	require.NoError(t, err)
	return certs
}

// viaSecret stores s in a Secret and reads it back, as another replica would.
func viaSecret(t *testing.T, s *caState) *caState {
	t.Helper()
	secret := &corev1.Secret{}
	s.encodeInto(secret)
	read, err := decodeCAState(secret)
	require.NoError(t, err)
	return read
}

func TestCARotation(t *testing.T) {
	const lifetime = 300 * time.Hour
	policy := caPolicy{lifetime: lifetime, renewFraction: 2.0 / 3, overlap: 40 * time.Hour}
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

	step := func(s *caState, at time.Time, want ...caTransition) *caState {
		t.Helper()
		next, done, err := policy.step(s, at)
		require.NoError(t, err)
		assert.Equal(t, want, done, "at %s", at)
		return viaSecret(t, next)
	}

	s := step(nil, now, caCreated)
	first := s.active.cert
	assert.Equal(t, []*x509.Certificate{first}, bundleOf(t, s.bundle()))

	// Until two thirds of its validity, nothing changes.
	renewal := renewalTime(first, policy.renewFraction)
	assert.Equal(t, renewal, policy.wakeup(s))
	s = step(s, renewal.Add(-time.Second))

	// Then a second CA is trusted, but the first still issues.
	s = step(s, renewal, caNextPublished)
	second := s.next.cert
	assert.True(t, s.active.cert.Equal(first))
	assert.Equal(t, []*x509.Certificate{first, second}, bundleOf(t, s.bundle()))
	assert.True(t, s.nextSince.Equal(renewal))

	// One overlap later, the second CA issues; the first stays trusted.
	switchAt := renewal.Add(policy.overlap)
	assert.Equal(t, switchAt, policy.wakeup(s))
	s = step(s, switchAt.Add(-time.Second))
	s = step(s, switchAt, caSwitched)
	assert.True(t, s.active.cert.Equal(second))
	assert.Nil(t, s.next)
	assert.Equal(t, []*x509.Certificate{second, first}, bundleOf(t, s.bundle()))

	// One more overlap later, the first CA leaves the bundle, before it expires.
	retireAt := switchAt.Add(policy.overlap)
	require.True(t, retireAt.Before(first.NotAfter))
	assert.Equal(t, retireAt, policy.wakeup(s))
	s = step(s, retireAt, caPreviousRetired)
	assert.Equal(t, []*x509.Certificate{second}, bundleOf(t, s.bundle()))

	// The second CA rotates the same way.
	s = step(s, renewalTime(second, policy.renewFraction), caNextPublished)
	assert.Len(t, bundleOf(t, s.bundle()), 2)
}

// A serving certificate is only ever issued by a CA that clients trusted for an
// overlap already, and stays verifiable for an overlap after its CA stops issuing.
func TestCARotationKeepsServedCertificatesVerifiable(t *testing.T) {
	policy := caPolicy{lifetime: 30 * time.Hour, renewFraction: 0.5, overlap: 3 * time.Hour}
	start := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	s, _, err := policy.step(nil, start)
	require.NoError(t, err)

	// bundles[i] is the bundle at hour i.
	var bundles [][]byte
	var issuers []*keyPair
	for hour := range 100 {
		now := start.Add(time.Duration(hour) * time.Hour)
		s, _, err = policy.step(s, now)
		require.NoError(t, err)
		bundles = append(bundles, s.bundle())
		issuers = append(issuers, s.active)
	}
	for hour, issuer := range issuers {
		now := start.Add(time.Duration(hour) * time.Hour)
		serving, err := newServingCertificate(issuer, now, servingOptions{dnsNames: []string{"localhost"}, lifetime: time.Hour})
		require.NoError(t, err)
		// Clients that last read the bundle up to two hours ago, or read it in the next
		// two hours, verify it.
		for seen := max(0, hour-2); seen <= min(len(bundles)-1, hour+2); seen++ {
			roots := x509.NewCertPool()
			require.True(t, roots.AppendCertsFromPEM(bundles[seen]))
			_, err := serving.Leaf.Verify(x509.VerifyOptions{DNSName: "localhost", Roots: roots, CurrentTime: now})
			assert.NoError(t, err, "a certificate served at hour %d with the bundle of hour %d", hour, seen)
		}
	}
}

func TestExpiredCAIsReplaced(t *testing.T) {
	policy := caPolicy{lifetime: time.Hour, renewFraction: 0.5, overlap: 10 * time.Minute}
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	s, _, err := policy.step(nil, now)
	require.NoError(t, err)
	old := s.active.cert

	s, done, err := policy.step(s, old.NotAfter)
	require.NoError(t, err)
	assert.Equal(t, []caTransition{caReplaced}, done)
	assert.False(t, s.active.cert.Equal(old))
	assert.Len(t, bundleOf(t, s.bundle()), 1)
}

func TestDecodeCAState(t *testing.T) {
	_, err := decodeCAState(&corev1.Secret{})
	assert.Error(t, err, "a Secret without a CA")

	policy := caPolicy{lifetime: time.Hour, renewFraction: 0.5, overlap: 10 * time.Minute}
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	s, _, err := policy.step(nil, now)
	require.NoError(t, err)
	s, _, err = policy.step(s, renewalTime(s.active.cert, 0.5))
	require.NoError(t, err)
	secret := &corev1.Secret{}
	s.encodeInto(secret)

	// A damaged next CA is dropped, and published again by the next step.
	secret.Data[secretKeyNextCAKey] = []byte("garbage")
	read, err := decodeCAState(secret)
	require.NoError(t, err)
	assert.Nil(t, read.next)
	assert.True(t, read.active.cert.Equal(s.active.cert))
}
