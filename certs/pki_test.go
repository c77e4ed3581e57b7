package certs

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/x509"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestNewCA(t *testing.T) {
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	ca, err := newCA(now, 365*24*time.Hour)
	require.NoError(t, err)

	cert := ca.cert
	assert.True(t, cert.IsCA)
	assert.True(t, cert.BasicConstraintsValid)
	assert.True(t, cert.MaxPathLenZero, "the CA must not sign other CAs")
	assert.Equal(t, x509.KeyUsageCertSign|x509.KeyUsageCRLSign|x509.KeyUsageDigitalSignature, cert.KeyUsage)
	assert.Equal(t, now.Add(365*24*time.Hour), cert.NotAfter)
	assert.Equal(t, now.Add(-maxBackdate), cert.NotBefore)
	assert.NotEmpty(t, cert.SubjectKeyId)
	assert.Contains(t, cert.Subject.CommonName, "compositor-webhook-ca@")
	require.NoError(t, cert.CheckSignatureFrom(cert), "a CA is self-signed")

	key, ok := ca.key.(*ecdsa.PrivateKey)
	require.True(t, ok, "the CA key is %T", ca.key)
	assert.Equal(t, elliptic.P256(), key.Curve)

	parsed, err := parseKeyPair(ca.certPEM, ca.keyPEM)
	require.NoError(t, err, "the PEM encoding reads back")
	assert.True(t, parsed.cert.Equal(cert))
}

func TestNewServingCertificate(t *testing.T) {
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	ca, err := newCA(now, 365*24*time.Hour)
	require.NoError(t, err)
	opts := servingOptions{
		dnsNames:    ServiceDNSNames("compositor-webhook", "compositor-system"),
		ipAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		lifetime:    90 * 24 * time.Hour,
	}

	serving, err := newServingCertificate(ca, now, opts)
	require.NoError(t, err)
	leaf := serving.Leaf
	require.NotNil(t, leaf)

	assert.Equal(t, []string{
		"compositor-webhook",
		"compositor-webhook.compositor-system",
		"compositor-webhook.compositor-system.svc",
		"compositor-webhook.compositor-system.svc.cluster.local",
	}, leaf.DNSNames)
	require.Len(t, leaf.IPAddresses, 1)
	assert.True(t, leaf.IPAddresses[0].Equal(net.ParseIP("127.0.0.1")))
	assert.False(t, leaf.IsCA)
	assert.Equal(t, x509.KeyUsageDigitalSignature, leaf.KeyUsage)
	assert.Equal(t, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, leaf.ExtKeyUsage)
	assert.Equal(t, now.Add(90*24*time.Hour), leaf.NotAfter)
	assert.True(t, leaf.NotBefore.Before(now))
	assert.Equal(t, ca.cert.SubjectKeyId, leaf.AuthorityKeyId)

	roots := x509.NewCertPool()
	roots.AddCert(ca.cert)
	for _, name := range []string{"compositor-webhook.compositor-system.svc", "127.0.0.1"} {
		_, err := leaf.Verify(x509.VerifyOptions{
			DNSName:     name,
			Roots:       roots,
			CurrentTime: now,
			KeyUsages:   []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		})
		assert.NoError(t, err, "verifying for %s", name)
	}
}

func TestServingCertificateNeverOutlivesItsCA(t *testing.T) {
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	ca, err := newCA(now, 24*time.Hour)
	require.NoError(t, err)
	serving, err := newServingCertificate(ca, now.Add(23*time.Hour), servingOptions{dnsNames: []string{"localhost"}, lifetime: 90 * 24 * time.Hour})
	require.NoError(t, err)
	assert.Equal(t, ca.cert.NotAfter, serving.Leaf.NotAfter)
}

func TestBackdateKeepsShortLifetimesUsable(t *testing.T) {
	assert.Equal(t, 300*time.Millisecond, backdate(3*time.Second))
	assert.Equal(t, maxBackdate, backdate(90*24*time.Hour))
}

func TestParseKeyPairRejectsAForeignKey(t *testing.T) {
	now := time.Now()
	a, err := newCA(now, time.Hour)
	require.NoError(t, err)
	b, err := newCA(now, time.Hour)
	require.NoError(t, err)
	_, err = parseKeyPair(a.certPEM, b.keyPEM)
	assert.ErrorContains(t, err, "does not match")
	_, err = parseKeyPair(a.certPEM, nil)
	assert.Error(t, err)
	_, err = parseKeyPair(nil, a.keyPEM)
	assert.Error(t, err)
}
