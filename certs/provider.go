package certs

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"sync"
)

// Provider serves the webhook's certificate and knows the CA bundle clients must trust.
type Provider interface {
	// GetCertificate is used as tls.Config.GetCertificate; it always returns the current
	// certificate, and ErrNotReady before Ensure succeeded.
	GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error)
	// CABundle returns the PEM bundle API servers must trust now (old and new CA during
	// a rotation overlap); nil before Ensure succeeded.
	CABundle() []byte
	// Start runs rotation/watching until ctx is done (a manager.Runnable; it must be
	// safe to call after Ensure). It returns nil when ctx is done.
	Start(ctx context.Context) error
	// Ensure loads or creates what is needed so that GetCertificate and CABundle work;
	// call once before serving.
	Ensure(ctx context.Context) error
	// Subscribe registers fn to be called with the new bundle every time it changes.
	// When a bundle is already known, fn is called with it before Subscribe returns, so
	// a subscriber misses no change. Calls are made one at a time, in order; fn must
	// not call Subscribe.
	Subscribe(fn func(bundle []byte))
}

// ErrNotReady is returned by GetCertificate before a certificate was loaded.
var ErrNotReady = errors.New("certs: no serving certificate loaded yet")

// bundleNotifier tells subscribers about bundle changes, one change at a time.
type bundleNotifier struct {
	mu          sync.Mutex
	subscribers []func([]byte)
	last        []byte
}

func (n *bundleNotifier) subscribe(fn func([]byte)) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.subscribers = append(n.subscribers, fn)
	if n.last != nil {
		fn(bytes.Clone(n.last))
	}
}

// publish calls every subscriber when bundle differs from the last one published.
func (n *bundleNotifier) publish(bundle []byte) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if bytes.Equal(n.last, bundle) {
		return
	}
	n.last = bytes.Clone(bundle)
	for _, fn := range n.subscribers {
		fn(bytes.Clone(bundle))
	}
}
