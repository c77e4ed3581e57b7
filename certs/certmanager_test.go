package certs

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// secretVolume writes files the way the kubelet updates a Secret volume: into a new
// timestamped directory, then swaps the ..data symlink to it in one rename; the visible
// files are symlinks through ..data.
type secretVolume struct {
	dir      string
	versions int
}

func (v *secretVolume) write(t *testing.T, files map[string][]byte) {
	t.Helper()
	v.versions++
	version := fmt.Sprintf("..2030_01_01_00_00_%02d.%d", v.versions, v.versions)
	require.NoError(t, os.Mkdir(filepath.Join(v.dir, version), 0o755))
	for name, content := range files {
		require.NoError(t, os.WriteFile(filepath.Join(v.dir, version, name), content, 0o600))
	}
	old, _ := os.Readlink(filepath.Join(v.dir, kubeletDataDir))
	tmp := filepath.Join(v.dir, "..data_tmp")
	require.NoError(t, os.Symlink(version, tmp))
	require.NoError(t, os.Rename(tmp, filepath.Join(v.dir, kubeletDataDir)))
	for name := range files {
		link := filepath.Join(v.dir, name)
		if _, err := os.Lstat(link); os.IsNotExist(err) {
			require.NoError(t, os.Symlink(filepath.Join(kubeletDataDir, name), link))
		}
	}
	if old != "" {
		require.NoError(t, os.RemoveAll(filepath.Join(v.dir, old)))
	}
}

// issued is what cert-manager writes into a Certificate's Secret.
func issued(t *testing.T, ca *keyPair) map[string][]byte {
	t.Helper()
	serving, err := newServingCertificate(ca, time.Now(), servingOptions{
		dnsNames:    []string{"localhost"},
		ipAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		lifetime:    time.Hour,
	})
	require.NoError(t, err)
	keyDER, err := x509.MarshalPKCS8PrivateKey(serving.PrivateKey)
	require.NoError(t, err)
	return map[string][]byte{
		CertFile:   pem.EncodeToMemory(&pem.Block{Type: pemCertificate, Bytes: serving.Certificate[0]}),
		KeyFile:    pem.EncodeToMemory(&pem.Block{Type: pemPrivateKey, Bytes: keyDER}),
		CACertFile: ca.certPEM,
	}
}

func serialOf(t *testing.T, files map[string][]byte) string {
	t.Helper()
	cert, err := parseCertificate(files[CertFile])
	require.NoError(t, err)
	return cert.SerialNumber.String()
}

func TestCertManagerReloadsWithoutRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), hangGuard)
	defer cancel()
	firstCA, err := newCA(time.Now(), 24*time.Hour)
	require.NoError(t, err)
	volume := &secretVolume{dir: t.TempDir()}
	first := issued(t, firstCA)
	volume.write(t, first)

	// A poll interval longer than the test: only change notifications reload.
	provider, err := NewCertManager(CertManagerOptions{Dir: volume.dir, PollInterval: time.Hour})
	require.NoError(t, err)
	require.NoError(t, provider.Ensure(ctx))
	assert.Equal(t, firstCA.certPEM, provider.CABundle())
	bundles := make(chan []byte, 10)
	provider.Subscribe(func(bundle []byte) { bundles <- bundle })
	assert.Equal(t, firstCA.certPEM, <-bundles, "a subscriber hears of the current bundle at once")

	started := make(chan error, 1)
	go func() { started <- provider.Start(ctx) }()
	url := startTLSServer(t, provider.GetCertificate)
	var trust trustStore
	trust.set(provider.CABundle())

	served, err := servedCertificate(ctx, url, trust.get())
	require.NoError(t, err)
	assert.Equal(t, serialOf(t, first), served.SerialNumber.String())

	// cert-manager renews the certificate: the server serves the new one.
	second := issued(t, firstCA)
	volume.write(t, second)
	waitForSerial(ctx, t, url, trust.get, serialOf(t, second))

	// The CA changes too: the bundle follows, and the new certificate verifies with it.
	secondCA, err := newCA(time.Now(), 24*time.Hour)
	require.NoError(t, err)
	third := issued(t, secondCA)
	volume.write(t, third)
	select {
	case bundle := <-bundles:
		assert.Equal(t, secondCA.certPEM, bundle)
		trust.set(bundle)
	case <-ctx.Done():
		t.Fatal("the new ca.crt was never published")
	}
	waitForSerial(ctx, t, url, trust.get, serialOf(t, third))

	cancel()
	require.NoError(t, <-started)
}

// waitForSerial requests url until it serves the certificate with serial. Requests
// made before the reload may fail verification once the trust pool moved on.
func waitForSerial(ctx context.Context, t *testing.T, url string, roots func() *x509.CertPool, serial string) {
	t.Helper()
	for {
		served, err := servedCertificate(ctx, url, roots())
		last := fmt.Sprint(err)
		if err == nil {
			if last = served.SerialNumber.String(); last == serial {
				return
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the server never served serial %s (last: %s)", serial, last)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func TestCertManagerEnsureFailsWithoutFiles(t *testing.T) {
	provider, err := NewCertManager(CertManagerOptions{Dir: t.TempDir()})
	require.NoError(t, err)
	assert.Error(t, provider.Ensure(t.Context()))
	_, err = provider.GetCertificate(nil)
	assert.ErrorIs(t, err, ErrNotReady)
	assert.Nil(t, provider.CABundle())

	_, err = NewCertManager(CertManagerOptions{})
	assert.ErrorIs(t, err, ErrInvalidOptions)
}
