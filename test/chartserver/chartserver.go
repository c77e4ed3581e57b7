// Package chartserver runs chart sources on loopback for tests: a Helm HTTP repository
// (a directory of packaged charts with its index.yaml) and a real OCI registry
// (distribution, in-process, in-memory storage). Both can require basic auth and serve
// TLS with a self-signed certificate whose PEM they expose, and both log every request
// so tests can prove what was (not) downloaded. `compositor dev` serves its sample
// charts with package samples instead, so that no test package is linked into it.
//
// Start* constructors return an error and leave closing to the caller; New* take a
// test handle, fail it on error and close on cleanup.
package chartserver

import (
	"crypto/subtle"
	"encoding/pem"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
)

// TB is the part of testing.TB the New* constructors use, so this package does not
// import testing.
type TB interface {
	Helper()
	Cleanup(func())
	Fatalf(format string, args ...any)
}

// Request is one request a server received.
type Request struct {
	Method string
	Path   string
	// Authorization reports whether the request carried an Authorization header.
	Authorization bool
}

// RequestLog records requests. It is safe for concurrent use.
type RequestLog struct {
	mu   sync.Mutex
	reqs []Request
}

// Count returns how many requests (any method) were made for path.
func (l *RequestLog) Count(path string) int {
	return l.CountFunc(func(r Request) bool { return r.Path == path })
}

// CountFunc returns how many requests match.
func (l *RequestLog) CountFunc(match func(Request) bool) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, r := range l.reqs {
		if match(r) {
			n++
		}
	}
	return n
}

// Requests returns a copy of the log.
func (l *RequestLog) Requests() []Request {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]Request(nil), l.reqs...)
}

// Reset empties the log.
func (l *RequestLog) Reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.reqs = nil
}

func (l *RequestLog) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		l.mu.Lock()
		l.reqs = append(l.reqs, Request{Method: r.Method, Path: r.URL.Path, Authorization: r.Header.Get("Authorization") != ""})
		l.mu.Unlock()
		h.ServeHTTP(w, r)
	})
}

// basicAuth refuses requests without the given credentials.
func basicAuth(username, password string, h http.Handler) http.Handler {
	if username == "" && password == "" {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u, p, ok := r.BasicAuth()
		if !ok || subtle.ConstantTimeCompare([]byte(u), []byte(username)) != 1 ||
			subtle.ConstantTimeCompare([]byte(p), []byte(password)) != 1 {
			w.Header().Set("WWW-Authenticate", `Basic realm="chartserver"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// start serves h on addr (default 127.0.0.1:0), with TLS if asked, and returns the
// server and the PEM of its certificate (nil without TLS).
func start(addr string, useTLS bool, h http.Handler) (*httptest.Server, []byte, error) {
	srv := httptest.NewUnstartedServer(h)
	// Clients refusing the certificate are part of the tests; keep their handshake
	// errors out of the output.
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	if addr != "" && addr != "127.0.0.1:0" {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			srv.Close()
			return nil, nil, err
		}
		srv.Listener.Close()
		srv.Listener = ln
	}
	if !useTLS {
		srv.Start()
		return srv, nil, nil
	}
	srv.StartTLS()
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	return srv, caPEM, nil
}

func hostOf(rawURL string) string {
	_, rest, _ := strings.Cut(rawURL, "://")
	return rest
}
