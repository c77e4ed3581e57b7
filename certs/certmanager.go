package certs

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// Files of a cert-manager Certificate's Secret, mounted as a volume.
const (
	CertFile   = "tls.crt"
	KeyFile    = "tls.key"
	CACertFile = "ca.crt"

	// kubeletDataDir is the symlink the kubelet swaps to update a Secret volume at once;
	// the files are symlinks through it.
	kubeletDataDir = "..data"
)

// DefaultPollInterval is how often NewCertManager's provider re-reads its files in case
// a change notification was missed.
const DefaultPollInterval = 10 * time.Second

// CertManagerOptions configure NewCertManager.
type CertManagerOptions struct {
	// Dir holds tls.crt, tls.key and ca.crt: the mounted Secret of the Certificate.
	Dir string
	// PollInterval is how often the files are re-read besides change notifications,
	// DefaultPollInterval when zero.
	PollInterval time.Duration
}

// certManagerProvider serves what cert-manager wrote into a directory and reloads it
// when the files change.
type certManagerProvider struct {
	opts CertManagerOptions

	loadMu   sync.Mutex
	cert     atomic.Pointer[tls.Certificate]
	bundle   atomic.Pointer[[]byte]
	notifier bundleNotifier
}

var (
	_ Provider                       = (*certManagerProvider)(nil)
	_ manager.LeaderElectionRunnable = (*certManagerProvider)(nil)
)

// NewCertManager returns a Provider that serves tls.crt and tls.key from opts.Dir and
// takes the CA bundle from ca.crt there; cert-manager issues and renews them.
func NewCertManager(opts CertManagerOptions) (Provider, error) {
	if opts.Dir == "" {
		return nil, fmt.Errorf("%w: the certificate directory is required", ErrInvalidOptions)
	}
	if opts.PollInterval == 0 {
		opts.PollInterval = DefaultPollInterval
	}
	if opts.PollInterval < 0 {
		return nil, fmt.Errorf("%w: the poll interval must be positive", ErrInvalidOptions)
	}
	return &certManagerProvider{opts: opts}, nil
}

func (p *certManagerProvider) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	if cert := p.cert.Load(); cert != nil {
		return cert, nil
	}
	return nil, ErrNotReady
}

func (p *certManagerProvider) CABundle() []byte {
	if bundle := p.bundle.Load(); bundle != nil {
		return bytes.Clone(*bundle)
	}
	return nil
}

func (p *certManagerProvider) Subscribe(fn func([]byte)) { p.notifier.subscribe(fn) }

// NeedLeaderElection is false: every replica serves webhooks.
func (p *certManagerProvider) NeedLeaderElection() bool { return false }

func (p *certManagerProvider) Ensure(ctx context.Context) error {
	return p.load(ctx)
}

// Start reloads the files on every change in the directory, and every poll interval.
// The directory is watched rather than the files, because the kubelet replaces a
// Secret volume's files by swapping the ..data symlink.
func (p *certManagerProvider) Start(ctx context.Context) error {
	logger := log.FromContext(ctx).WithValues("dir", p.opts.Dir)
	watcher, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watching %s: %w", p.opts.Dir, err)
	}
	defer func() { _ = watcher.Close() }()
	if err := watcher.Add(p.opts.Dir); err != nil {
		return fmt.Errorf("watching %s: %w", p.opts.Dir, err)
	}
	ticker := time.NewTicker(p.opts.PollInterval)
	defer ticker.Stop()

	reload := func() {
		if err := p.load(ctx); err != nil {
			// The next event or poll retries: a half-written update is normal.
			logger.Error(err, "Reloading the webhook certificate failed")
		}
	}
	reload()
	for {
		select {
		case <-ctx.Done():
			return nil
		case event, ok := <-watcher.Events:
			if !ok {
				return nil
			}
			logger.V(1).Info("Certificate directory changed", "event", event.String())
			reload()
		case err, ok := <-watcher.Errors:
			if !ok {
				return nil
			}
			logger.Error(err, "Watching the certificate directory failed")
		case <-ticker.C:
			reload()
		}
	}
}

// load reads the files and switches to them when they changed.
func (p *certManagerProvider) load(ctx context.Context) error {
	p.loadMu.Lock()
	defer p.loadMu.Unlock()

	// Reading through the resolved ..data symlink reads one version of every file, even
	// if the kubelet swaps it meanwhile.
	dir := p.opts.Dir
	if resolved, err := filepath.EvalSymlinks(filepath.Join(dir, kubeletDataDir)); err == nil {
		dir = resolved
	}
	read := func(name string) ([]byte, error) {
		content, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return nil, fmt.Errorf("reading the certificate files: %w", err)
		}
		return content, nil
	}
	certPEM, err := read(CertFile)
	if err != nil {
		return err
	}
	keyPEM, err := read(KeyFile)
	if err != nil {
		return err
	}
	bundle, err := read(CACertFile)
	if err != nil {
		return err
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return fmt.Errorf("loading %s and %s from %s: %w", CertFile, KeyFile, p.opts.Dir, err)
	}
	if cert.Leaf == nil { // GODEBUG=x509keypairleaf=0 leaves it to us
		if cert.Leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return fmt.Errorf("loading %s from %s: %w", CertFile, p.opts.Dir, err)
		}
	}
	if _, err := parseCertificates(bundle); err != nil {
		return fmt.Errorf("loading %s from %s: %w", CACertFile, p.opts.Dir, err)
	}

	if current := p.cert.Load(); current == nil || !bytes.Equal(current.Certificate[0], cert.Certificate[0]) {
		p.cert.Store(&cert)
		log.FromContext(ctx).Info("Loaded the webhook serving certificate", "dir", p.opts.Dir,
			"serial", cert.Leaf.SerialNumber.Text(16), "notAfter", cert.Leaf.NotAfter)
	}
	p.bundle.Store(&bundle)
	p.notifier.publish(bundle)
	return nil
}
