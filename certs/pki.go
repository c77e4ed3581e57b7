package certs

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"time"
)

const (
	pemCertificate = "CERTIFICATE"
	pemPrivateKey  = "PRIVATE KEY"

	// maxBackdate bounds how far NotBefore is set in the past, to accept certificates
	// on API servers whose clocks run a little behind ours.
	maxBackdate = 5 * time.Minute
)

// keyPair is a certificate with its private key, parsed and in PEM.
type keyPair struct {
	cert    *x509.Certificate
	key     crypto.Signer
	certPEM []byte
	keyPEM  []byte
}

// backdate is how much earlier than now a certificate of the given lifetime starts: a
// tenth of the lifetime, at most maxBackdate, so that short test lifetimes stay usable.
func backdate(lifetime time.Duration) time.Duration {
	return min(lifetime/10, maxBackdate)
}

// renewalTime is when a certificate has used fraction of its validity.
func renewalTime(cert *x509.Certificate, fraction float64) time.Time {
	validity := cert.NotAfter.Sub(cert.NotBefore)
	return cert.NotBefore.Add(time.Duration(float64(validity) * fraction))
}

func newSerialNumber() (*big.Int, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, fmt.Errorf("generating a serial number: %w", err)
	}
	return serial, nil
}

// newCA creates a self-signed CA valid from now for lifetime. Its common name carries
// the creation time so that the CAs of a rotation are told apart by name too.
func newCA(now time.Time, lifetime time.Duration) (*keyPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating the CA key: %w", err)
	}
	serial, err := newSerialNumber()
	if err != nil {
		return nil, err
	}
	template := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: fmt.Sprintf("compositor-webhook-ca@%d", now.Unix())},
		NotBefore:             now.Add(-backdate(lifetime)),
		NotAfter:              now.Add(lifetime),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		// The CA signs serving certificates only, never other CAs.
		MaxPathLenZero: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, template, template, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("self-signing the CA: %w", err)
	}
	return newKeyPair(der, key)
}

// servingOptions names the server a serving certificate is for.
type servingOptions struct {
	dnsNames    []string
	ipAddresses []net.IP
	lifetime    time.Duration
}

// newServingCertificate issues a TLS server certificate from ca. It never outlives ca.
func newServingCertificate(ca *keyPair, now time.Time, opts servingOptions) (*tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating the serving key: %w", err)
	}
	serial, err := newSerialNumber()
	if err != nil {
		return nil, err
	}
	commonName := "compositor-webhook"
	if len(opts.dnsNames) > 0 {
		commonName = opts.dnsNames[0]
	}
	template := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: commonName},
		DNSNames:              opts.dnsNames,
		IPAddresses:           opts.ipAddresses,
		NotBefore:             now.Add(-backdate(opts.lifetime)),
		NotAfter:              minTime(now.Add(opts.lifetime), ca.cert.NotAfter),
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, template, ca.cert, key.Public(), ca.key)
	if err != nil {
		return nil, fmt.Errorf("issuing the serving certificate: %w", err)
	}
	pair, err := newKeyPair(der, key)
	if err != nil {
		return nil, err
	}
	return &tls.Certificate{
		Certificate: [][]byte{der},
		PrivateKey:  key,
		Leaf:        pair.cert,
	}, nil
}

func newKeyPair(der []byte, key crypto.Signer) (*keyPair, error) {
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parsing a certificate just created: %w", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("encoding a private key: %w", err)
	}
	return &keyPair{
		cert:    cert,
		key:     key,
		certPEM: pem.EncodeToMemory(&pem.Block{Type: pemCertificate, Bytes: der}),
		keyPEM:  pem.EncodeToMemory(&pem.Block{Type: pemPrivateKey, Bytes: keyDER}),
	}, nil
}

// parseKeyPair reads a PEM certificate and the PEM private key that goes with it.
func parseKeyPair(certPEM, keyPEM []byte) (*keyPair, error) {
	cert, err := parseCertificate(certPEM)
	if err != nil {
		return nil, err
	}
	block, _ := pem.Decode(keyPEM)
	if block == nil {
		return nil, errors.New("no PEM block in the private key")
	}
	parsed, err := parsePrivateKey(block)
	if err != nil {
		return nil, err
	}
	key, ok := parsed.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("a private key of type %T cannot sign", parsed)
	}
	pub, ok := cert.PublicKey.(interface{ Equal(crypto.PublicKey) bool })
	if !ok || !pub.Equal(key.Public()) {
		return nil, errors.New("the private key does not match the certificate")
	}
	return &keyPair{cert: cert, key: key, certPEM: certPEM, keyPEM: keyPEM}, nil
}

func parsePrivateKey(block *pem.Block) (any, error) {
	switch block.Type {
	case pemPrivateKey:
		return x509.ParsePKCS8PrivateKey(block.Bytes)
	case "EC PRIVATE KEY":
		return x509.ParseECPrivateKey(block.Bytes)
	case "RSA PRIVATE KEY":
		return x509.ParsePKCS1PrivateKey(block.Bytes)
	default:
		return nil, fmt.Errorf("unsupported PEM block %q for a private key", block.Type)
	}
}

// parseCertificate reads the first certificate of a PEM bundle.
func parseCertificate(certPEM []byte) (*x509.Certificate, error) {
	certs, err := parseCertificates(certPEM)
	if err != nil {
		return nil, err
	}
	return certs[0], nil
}

// parseCertificates reads every certificate of a PEM bundle; it fails on an empty one.
func parseCertificates(bundle []byte) ([]*x509.Certificate, error) {
	var certs []*x509.Certificate
	for rest := bundle; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type != pemCertificate {
			continue
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("parsing a certificate: %w", err)
		}
		certs = append(certs, cert)
	}
	if len(certs) == 0 {
		return nil, errors.New("no PEM certificate found")
	}
	return certs, nil
}

// joinPEM concatenates PEM documents, each ending in a newline.
func joinPEM(docs ...[]byte) []byte {
	var b bytes.Buffer
	for _, doc := range docs {
		if len(doc) == 0 {
			continue
		}
		b.Write(doc)
		if doc[len(doc)-1] != '\n' {
			b.WriteByte('\n')
		}
	}
	return b.Bytes()
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
