package certs

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// startTLSServer serves HTTPS on 127.0.0.1 with getCertificate, as the webhook server
// will, until the test ends. It returns the server's URL.
func startTLSServer(t *testing.T, getCertificate func(*tls.ClientHelloInfo) (*tls.Certificate, error)) string {
	t.Helper()
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	server := &http.Server{
		Handler:           http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) }),
		TLSConfig:         &tls.Config{GetCertificate: getCertificate, MinVersion: tls.VersionTLS12},
		ReadHeaderTimeout: 10 * time.Second,
	}
	done := make(chan error, 1)
	go func() { done <- server.ServeTLS(listener, "", "") }()
	t.Cleanup(func() {
		require.NoError(t, server.Shutdown(context.Background()))
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("serving: %v", err)
		}
	})
	return "https://" + listener.Addr().String()
}

// servedCertificate makes one request to url on a new connection, trusting only roots,
// and returns the certificate the server presented.
func servedCertificate(ctx context.Context, url string, roots *x509.CertPool) (*x509.Certificate, error) {
	transport := &http.Transport{
		TLSClientConfig:   &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12},
		DisableKeepAlives: true,
	}
	defer transport.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := (&http.Client{Transport: transport}).Do(req)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return nil, errors.New(resp.Status)
	}
	return resp.TLS.PeerCertificates[0], nil
}

// trustStore is a client's trust pool, replaced whenever the provider's bundle changes.
type trustStore struct{ pool atomic.Pointer[x509.CertPool] }

func (s *trustStore) set(bundle []byte) {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(bundle)
	s.pool.Store(pool)
}

func (s *trustStore) get() *x509.CertPool { return s.pool.Load() }

// hangGuard is how long a test waits for something it expects before giving up: it
// only keeps a broken test from hanging, and measures nothing.
const hangGuard = 2 * time.Minute
