package webhooks

import (
	"bytes"
	"crypto/tls"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/compositor-dev/compositor/certs/webhookclient"
)

// clientAuthServer serves, over TLS with auth, a webhook server whose every path
// counts the requests that reach it; reached counts them.
func clientAuthServer(t *testing.T, auth *ClientAuth) (srv *httptest.Server, reached *atomic.Int64) {
	t.Helper()
	reached = &atomic.Int64{}
	inner := webhook.NewServer(webhook.Options{})
	server := auth.Server(inner)
	for _, path := range []string{MutatePath, ValidatePath, StatusPath, ConvertPath} {
		server.Register(path, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			reached.Add(1)
			_, _ = io.Copy(io.Discard, r.Body)
			_, _ = w.Write([]byte("judged"))
		}))
	}
	srv = httptest.NewUnstartedServer(inner.WebhookMux())
	srv.TLS = &tls.Config{MinVersion: tls.VersionTLS12}
	auth.ConfigureTLS(srv.TLS)
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv, reached
}

// unauthenticatedRefusals reads compositor_webhook_unauthenticated_total{reason}.
func unauthenticatedRefusals(t *testing.T, reason string) float64 {
	t.Helper()
	m := &dto.Metric{}
	require.NoError(t, unauthenticatedTotal.WithLabelValues(reason).Write(m))
	return m.GetCounter().GetValue()
}

// callAs posts to path of srv on a new connection, presenting the client certificate
// of client (none when nil).
func callAs(srv *httptest.Server, client *webhookclient.Files, path string) (int, string, error) {
	transport := srv.Client().Transport.(*http.Transport).Clone()
	transport.DisableKeepAlives = true
	if client != nil {
		cert, err := tls.LoadX509KeyPair(client.CertFile, client.KeyFile)
		if err != nil {
			return 0, "", err
		}
		transport.TLSClientConfig.Certificates = []tls.Certificate{cert}
	}
	defer transport.CloseIdleConnections()
	resp, err := (&http.Client{Transport: transport}).Post(srv.URL+path, "application/json", bytes.NewReader([]byte(`{"not": "read"}`)))
	if err != nil {
		return 0, "", err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}

func TestClientAuthHearsOnlyItsClient(t *testing.T) {
	apiServer, err := webhookclient.Write(filepath.Join(t.TempDir(), "apiserver"))
	require.NoError(t, err)
	stranger, err := webhookclient.Write(filepath.Join(t.TempDir(), "stranger"))
	require.NoError(t, err)
	auth, err := NewClientAuth(apiServer.CAFile, []string{webhookclient.Name})
	require.NoError(t, err)
	srv, reached := clientAuthServer(t, auth)

	for _, path := range []string{MutatePath, ValidatePath, StatusPath, ConvertPath} {
		t.Run("the API server is heard on "+path, func(t *testing.T) {
			before := reached.Load()
			code, body, err := callAs(srv, apiServer, path)
			require.NoError(t, err)
			assert.Equal(t, http.StatusOK, code)
			assert.Equal(t, "judged", body)
			assert.Equal(t, before+1, reached.Load())
		})
	}
	for _, path := range []string{MutatePath, ValidatePath, StatusPath} {
		t.Run("no certificate is refused on "+path, func(t *testing.T) {
			before, refused := reached.Load(), unauthenticatedRefusals(t, refusedNoCertificate)
			code, body, err := callAs(srv, nil, path)
			require.NoError(t, err)
			assert.Equal(t, http.StatusForbidden, code)
			assert.Contains(t, body, "a client certificate signed by the webhook client CA is required")
			assert.Equal(t, before, reached.Load(), "the handler is not reached")
			assert.Equal(t, refused+1, unauthenticatedRefusals(t, refusedNoCertificate))
		})
	}
	t.Run("conversion hears a caller without a certificate", func(t *testing.T) {
		// The API server presents none to CRD conversion webhooks.
		code, body, err := callAs(srv, nil, ConvertPath)
		require.NoError(t, err)
		assert.Equal(t, http.StatusOK, code)
		assert.Equal(t, "judged", body)
	})
	t.Run("a certificate of another CA fails the handshake", func(t *testing.T) {
		for _, path := range []string{ValidatePath, ConvertPath} {
			before, refused := reached.Load(), unauthenticatedRefusals(t, refusedUntrusted)
			_, _, err := callAs(srv, stranger, path)
			require.Error(t, err, path)
			assert.Equal(t, before, reached.Load(), path)
			assert.Equal(t, refused+1, unauthenticatedRefusals(t, refusedUntrusted), path)
		}
	})
}

func TestClientAuthChecksTheIdentity(t *testing.T) {
	apiServer, err := webhookclient.Write(filepath.Join(t.TempDir(), "apiserver"))
	require.NoError(t, err)
	auth, err := NewClientAuth(apiServer.CAFile, []string{"someone-else"})
	require.NoError(t, err)
	srv, reached := clientAuthServer(t, auth)
	refused := unauthenticatedRefusals(t, refusedIdentity)
	_, _, err = callAs(srv, apiServer, ValidatePath)
	require.Error(t, err)
	assert.Zero(t, reached.Load())
	assert.Equal(t, refused+1, unauthenticatedRefusals(t, refusedIdentity))
}

func TestClientAuthFollowsARotatedCA(t *testing.T) {
	old, err := webhookclient.Write(filepath.Join(t.TempDir(), "old"))
	require.NoError(t, err)
	rotated, err := webhookclient.Write(filepath.Join(t.TempDir(), "new"))
	require.NoError(t, err)
	caFile := filepath.Join(t.TempDir(), "ca.crt")
	copyFile := func(from string) {
		data, err := os.ReadFile(from)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(caFile, data, 0o600))
	}
	copyFile(old.CAFile)
	auth, err := NewClientAuth(caFile, nil)
	require.NoError(t, err)
	srv, _ := clientAuthServer(t, auth)
	code, _, err := callAs(srv, old, ValidatePath)
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, code)

	copyFile(rotated.CAFile)
	auth.lastCheck.Store(0) // the file is looked at again at the next handshake
	code, _, err = callAs(srv, rotated, ValidatePath)
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, code)
	_, _, err = callAs(srv, old, ValidatePath)
	require.Error(t, err, "the old CA is gone from the file")

	// A broken file keeps the CAs last read.
	require.NoError(t, os.WriteFile(caFile, []byte("not PEM"), 0o600))
	auth.lastCheck.Store(0)
	code, _, err = callAs(srv, rotated, ValidatePath)
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, code)
}

func TestNewClientAuthRefusesAFileWithoutCertificates(t *testing.T) {
	file := filepath.Join(t.TempDir(), "ca.crt")
	require.NoError(t, os.WriteFile(file, []byte("nothing"), 0o600))
	_, err := NewClientAuth(file, nil)
	require.ErrorContains(t, err, "holds no PEM certificate")
	_, err = NewClientAuth(filepath.Join(t.TempDir(), "missing"), nil)
	require.ErrorIs(t, err, os.ErrNotExist)
}
