package webhooks

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
)

// Reasons an unauthenticated caller was refused, the label of unauthenticatedTotal.
const (
	// refusedNoCertificate: the caller presented no client certificate (an HTTP 403,
	// before the body is read).
	refusedNoCertificate = "no-certificate"
	// refusedUntrusted: its certificate is not signed by the client CA, or not for
	// client authentication, or expired (the TLS handshake fails).
	refusedUntrusted = "untrusted-certificate"
	// refusedIdentity: its certificate is trusted but names no expected identity (the
	// TLS handshake fails).
	refusedIdentity = "identity"
)

// unauthenticatedTotal counts the callers refused for who they are, before any body
// is read.
var unauthenticatedTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "compositor_webhook_unauthenticated_total",
	Help: "Callers of the admission webhooks refused before their request was read, by reason: no-certificate (no client certificate; HTTP 403), untrusted-certificate (not signed by --webhook-client-ca; TLS handshake refused), identity (trusted, but not one of --webhook-client-name; TLS handshake refused).",
}, []string{"reason"})

func init() {
	metrics.Registry.MustRegister(unauthenticatedTotal)
}

// A refused caller without a certificate is answered after refusalDelay, so that one
// connection asks at most about once a second and, while it waits, costs a timer and
// not CPU; at most maxHeldRefusals wait at once, and past them a refusal is answered at
// once and its connection closed, so that the next request pays for a handshake.
const (
	refusalDelay    = time.Second
	maxHeldRefusals = 512
)

// caReloadInterval is how often the client CA file is looked at for a change: a
// mounted Secret or ConfigMap is replaced in place when its CA rotates.
const caReloadInterval = 10 * time.Second

// ClientAuth authenticates the callers of the admission webhooks: only a caller with a
// client certificate signed by the client CA (and, when names are given, issued to
// one of them) is heard.
//
// The certificate is verified in the TLS handshake (ConfigureTLS): a bad one costs a
// refused handshake and nothing else. A caller without a certificate completes the
// handshake, because the API server presents none to CRD conversion webhooks and
// /convert shares the port; Require then refuses it on the admission paths with a 403
// before a byte of its body is read.
type ClientAuth struct {
	file  string
	names []string

	// held are the refusals waiting out refusalDelay.
	held chan struct{}

	pool      atomic.Pointer[x509.CertPool]
	mu        sync.Mutex // serializes reloads
	loaded    []byte
	lastCheck atomic.Int64 // unix nanoseconds of the last look at file
}

// NewClientAuth reads the PEM CA bundle of caFile, which signs the API server's client
// certificate. names, when not empty, are the identities (common name or DNS name) a
// certificate must carry one of.
func NewClientAuth(caFile string, names []string) (*ClientAuth, error) {
	a := &ClientAuth{file: caFile, names: slices.Clone(names), held: make(chan struct{}, maxHeldRefusals)}
	if err := a.reload(); err != nil {
		return nil, err
	}
	a.lastCheck.Store(time.Now().UnixNano())
	return a, nil
}

// reload reads the CA file again and takes it when it changed and holds a
// certificate; a broken file keeps the CAs last read.
func (a *ClientAuth) reload() error {
	data, err := os.ReadFile(a.file)
	if err != nil {
		return fmt.Errorf("reading the webhook client CA: %w", err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if bytes.Equal(data, a.loaded) {
		return nil
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		return fmt.Errorf("the webhook client CA %s holds no PEM certificate", a.file)
	}
	a.pool.Store(pool)
	a.loaded = data
	return nil
}

// roots are the client CAs, looked at again when caReloadInterval has passed.
func (a *ClientAuth) roots(now time.Time) *x509.CertPool {
	last := a.lastCheck.Load()
	if now.UnixNano()-last > int64(caReloadInterval) && a.lastCheck.CompareAndSwap(last, now.UnixNano()) {
		_ = a.reload() // a missing or broken file keeps the CAs last read
	}
	return a.pool.Load()
}

// ConfigureTLS makes the server ask for a client certificate and verify the one
// given in the handshake, so that a caller with a bad certificate is refused there.
func (a *ClientAuth) ConfigureTLS(c *tls.Config) {
	// Asked for, verified by verifyConnection: Go's own VerifyClientCertIfGiven
	// verifies as well, but a refusal there reaches no callback and could not be
	// counted. No ClientCAs hint: a client then sends the certificate it has, and a
	// rotated CA needs no new config.
	c.ClientAuth = tls.RequestClientCert
	c.VerifyConnection = a.verifyConnection
}

// errUntrusted and errIdentity are why a handshake with a client certificate fails.
var (
	errUntrusted = errors.New("the client certificate is not signed by the webhook client CA")
	errIdentity  = errors.New("the client certificate is not issued to an expected identity")
)

func (a *ClientAuth) verifyConnection(cs tls.ConnectionState) error {
	if len(cs.PeerCertificates) == 0 {
		return nil // refused per path by Require: /convert takes such callers
	}
	now := time.Now()
	leaf := cs.PeerCertificates[0]
	intermediates := x509.NewCertPool()
	for _, cert := range cs.PeerCertificates[1:] {
		intermediates.AddCert(cert)
	}
	_, err := leaf.Verify(x509.VerifyOptions{
		Roots:         a.roots(now),
		Intermediates: intermediates,
		CurrentTime:   now,
		KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	if err != nil {
		unauthenticatedTotal.WithLabelValues(refusedUntrusted).Inc()
		return fmt.Errorf("%w: %w", errUntrusted, err)
	}
	if len(a.names) > 0 && !slices.Contains(a.names, leaf.Subject.CommonName) &&
		!slices.ContainsFunc(leaf.DNSNames, func(n string) bool { return slices.Contains(a.names, n) }) {
		unauthenticatedTotal.WithLabelValues(refusedIdentity).Inc()
		return fmt.Errorf("%w (%v): got %q", errIdentity, a.names, leaf.Subject.CommonName)
	}
	return nil
}

// Require refuses, with a 403 and before its body is read, a request whose connection
// presented no client certificate (after refusalDelay: see hold); one that did was
// verified in the handshake. A nil ClientAuth requires nothing.
func (a *ClientAuth) Require(next http.Handler) http.Handler {
	if a == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
			unauthenticatedTotal.WithLabelValues(refusedNoCertificate).Inc()
			a.hold(w, r)
			http.Error(w, "a client certificate signed by the webhook client CA is required: only the API server is heard here", http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// hold waits out refusalDelay before a refusal is answered, or closes the connection
// after it when maxHeldRefusals wait already.
func (a *ClientAuth) hold(w http.ResponseWriter, r *http.Request) {
	select {
	case a.held <- struct{}{}:
		timer := time.NewTimer(refusalDelay)
		select {
		case <-timer.C:
		case <-r.Context().Done():
		}
		timer.Stop()
		<-a.held
	default:
		w.Header().Set("Connection", "close")
	}
}

// Server is srv with Require in front of every path registered on it but ConvertPath,
// which the API server calls without a client certificate. A nil ClientAuth returns
// srv.
func (a *ClientAuth) Server(srv webhook.Server) webhook.Server {
	if a == nil {
		return srv
	}
	return authenticatedServer{Server: srv, auth: a}
}

type authenticatedServer struct {
	webhook.Server
	auth *ClientAuth
}

func (s authenticatedServer) Register(path string, hook http.Handler) {
	if path != ConvertPath {
		hook = s.auth.Require(hook)
	}
	s.Server.Register(path, hook)
}
