package certs

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// Defaults of BuiltinOptions.
const (
	DefaultCASecretName    = "compositor-webhook-ca"
	DefaultCALifetime      = 365 * 24 * time.Hour
	DefaultServingLifetime = 90 * 24 * time.Hour
	DefaultRenewFraction   = 2.0 / 3
	// DefaultResyncInterval is how often the CA Secret is re-read to pick up a CA that
	// another replica rotated, unless a quarter of the CA overlap is shorter.
	DefaultResyncInterval = time.Minute
)

// BuiltinOptions configure the built-in CA. Zero values take the defaults.
type BuiltinOptions struct {
	// Namespace holds the CA Secret: Compositor's own namespace.
	Namespace string
	// SecretName is the CA Secret, DefaultCASecretName when empty.
	SecretName string
	// DNSNames and IPAddresses are the names of the webhook server in its serving
	// certificate (ServiceDNSNames; "localhost" and 127.0.0.1 for dev). At least one is
	// required.
	DNSNames    []string
	IPAddresses []net.IP
	// CALifetime is the validity of each CA, DefaultCALifetime when zero.
	CALifetime time.Duration
	// ServingLifetime is the validity of each serving certificate,
	// DefaultServingLifetime when zero. It is cut short to never outlive its CA.
	ServingLifetime time.Duration
	// RenewFraction is the part of a certificate's validity after which it is
	// replaced, in (0, 1); DefaultRenewFraction when zero.
	RenewFraction float64
	// CAOverlap is how long a new CA is trusted before it issues serving certificates,
	// and how long the CA it replaces stays trusted after. It must be shorter than what
	// is left of a CA's lifetime after renewal; zero means half of that.
	CAOverlap time.Duration
	// ResyncInterval is how often the CA Secret is re-read; it must be shorter than
	// CAOverlap. Zero means DefaultResyncInterval or a quarter of CAOverlap if shorter.
	ResyncInterval time.Duration
	// Clock is the time source, clock.RealClock when nil; tests pass a fake one.
	Clock clock.Clock
}

// ServiceDNSNames are the names a Service is reached by from inside the cluster.
func ServiceDNSNames(service, namespace string) []string {
	return []string{
		service,
		service + "." + namespace,
		service + "." + namespace + ".svc",
		service + "." + namespace + ".svc.cluster.local",
	}
}

// ErrInvalidOptions is wrapped by the errors of NewBuiltin and NewCertManager about
// their options.
var ErrInvalidOptions = errors.New("certs: invalid certificate options")

func (o BuiltinOptions) withDefaults() (BuiltinOptions, error) {
	if o.SecretName == "" {
		o.SecretName = DefaultCASecretName
	}
	if o.CALifetime == 0 {
		o.CALifetime = DefaultCALifetime
	}
	if o.ServingLifetime == 0 {
		o.ServingLifetime = DefaultServingLifetime
	}
	if o.RenewFraction == 0 {
		o.RenewFraction = DefaultRenewFraction
	}
	afterRenewal := time.Duration(float64(o.CALifetime) * (1 - o.RenewFraction))
	if o.CAOverlap == 0 {
		o.CAOverlap = afterRenewal / 2
	}
	if o.ResyncInterval == 0 {
		o.ResyncInterval = min(DefaultResyncInterval, o.CAOverlap/4)
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}

	var problems []error
	if o.Namespace == "" {
		problems = append(problems, errors.New("a namespace is required for the CA Secret"))
	}
	if len(o.DNSNames) == 0 && len(o.IPAddresses) == 0 {
		problems = append(problems, errors.New("at least one DNS name or IP address is required"))
	}
	if o.CALifetime < 0 || o.ServingLifetime < 0 {
		problems = append(problems, errors.New("lifetimes must be positive"))
	}
	if o.RenewFraction <= 0 || o.RenewFraction >= 1 {
		problems = append(problems, fmt.Errorf("the renew fraction %v is not between 0 and 1", o.RenewFraction))
	}
	if o.CAOverlap <= 0 || o.CAOverlap >= afterRenewal {
		problems = append(problems, fmt.Errorf("the CA overlap %s must be positive and shorter than the %s a CA lives after its renewal", o.CAOverlap, afterRenewal))
	}
	if o.ResyncInterval <= 0 || o.ResyncInterval >= o.CAOverlap {
		problems = append(problems, fmt.Errorf("the resync interval %s must be positive and shorter than the CA overlap %s", o.ResyncInterval, o.CAOverlap))
	}
	if err := errors.Join(problems...); err != nil {
		return o, fmt.Errorf("%w: %w", ErrInvalidOptions, err)
	}
	return o, nil
}

// builtinProvider keeps a CA in a Secret shared by every replica, and issues its own
// serving certificate from it in memory.
type builtinProvider struct {
	c       client.Client
	key     client.ObjectKey
	opts    BuiltinOptions
	policy  caPolicy
	serving servingOptions

	// syncMu makes syncs, from Ensure and Start, one at a time; it guards the fields
	// below it.
	syncMu         sync.Mutex
	state          *caState
	servingCA      *x509.Certificate
	servingRenewal time.Time

	cert     atomic.Pointer[tls.Certificate]
	bundle   atomic.Pointer[[]byte]
	notifier bundleNotifier
}

var (
	_ Provider                       = (*builtinProvider)(nil)
	_ manager.LeaderElectionRunnable = (*builtinProvider)(nil)
)

// NewBuiltin returns a Provider with a CA kept in the Secret opts.SecretName. c reads
// that Secret at every resync: give it a client that reads from the API server, or one
// whose cache is limited to opts.Namespace, rather than a cache of every Secret.
func NewBuiltin(c client.Client, opts BuiltinOptions) (Provider, error) {
	if c == nil {
		return nil, fmt.Errorf("%w: a client is required", ErrInvalidOptions)
	}
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	return &builtinProvider{
		c:    c,
		key:  client.ObjectKey{Namespace: opts.Namespace, Name: opts.SecretName},
		opts: opts,
		policy: caPolicy{
			lifetime:      opts.CALifetime,
			renewFraction: opts.RenewFraction,
			overlap:       opts.CAOverlap,
		},
		serving: servingOptions{
			dnsNames:    opts.DNSNames,
			ipAddresses: opts.IPAddresses,
			lifetime:    opts.ServingLifetime,
		},
	}, nil
}

func (p *builtinProvider) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	if cert := p.cert.Load(); cert != nil {
		return cert, nil
	}
	return nil, ErrNotReady
}

func (p *builtinProvider) CABundle() []byte {
	if bundle := p.bundle.Load(); bundle != nil {
		return bytes.Clone(*bundle)
	}
	return nil
}

func (p *builtinProvider) Subscribe(fn func([]byte)) { p.notifier.subscribe(fn) }

// NeedLeaderElection is false: every replica serves webhooks with its own certificate.
func (p *builtinProvider) NeedLeaderElection() bool { return false }

func (p *builtinProvider) Ensure(ctx context.Context) error {
	_, err := p.sync(ctx)
	return err
}

// Start syncs at every rotation deadline and every resync interval, and on failure
// retries with a backoff.
func (p *builtinProvider) Start(ctx context.Context) error {
	logger := log.FromContext(ctx).WithValues("secret", p.key)
	firstBackoff := min(time.Second, p.opts.ResyncInterval)
	backoff := firstBackoff
	for {
		wakeup, err := p.sync(ctx)
		var wait time.Duration
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil:
			logger.Error(err, "Syncing the webhook certificates failed, retrying", "after", backoff)
			wait, backoff = backoff, min(2*backoff, p.opts.ResyncInterval)
		default:
			backoff = firstBackoff
			wait = max(0, min(p.opts.ResyncInterval, wakeup.Sub(p.opts.Clock.Now())))
		}
		timer := p.opts.Clock.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil
		case <-timer.C():
		}
	}
}

// sync brings the Secret and the serving certificate up to date and returns when they
// next need attention.
func (p *builtinProvider) sync(ctx context.Context) (time.Time, error) {
	p.syncMu.Lock()
	defer p.syncMu.Unlock()
	logger := log.FromContext(ctx).WithValues("secret", p.key)

	state, err := p.syncSecret(ctx)
	if err != nil {
		return time.Time{}, err
	}
	now := p.opts.Clock.Now()
	if p.cert.Load() == nil || !p.servingCA.Equal(state.active.cert) || !now.Before(p.servingRenewal) {
		cert, err := newServingCertificate(state.active, now, p.serving)
		if err != nil {
			return time.Time{}, err
		}
		p.cert.Store(cert)
		p.servingCA = state.active.cert
		p.servingRenewal = renewalTime(cert.Leaf, p.opts.RenewFraction)
		logger.Info("Issued a webhook serving certificate", "serial", cert.Leaf.SerialNumber.Text(16),
			"notAfter", cert.Leaf.NotAfter, "ca", state.active.cert.Subject.CommonName)
	}
	p.state = state
	bundle := state.bundle()
	p.bundle.Store(&bundle)
	p.notifier.publish(bundle)
	return minTime(p.policy.wakeup(state), p.servingRenewal), nil
}

// secretRetry bounds the retries when replicas race on the Secret: each retry re-reads
// it, and usually finds that another replica did the work.
var secretRetry = wait.Backoff{Steps: 10, Duration: 10 * time.Millisecond, Factor: 2, Jitter: 0.2, Cap: time.Second}

// syncSecret reads the CA Secret, creating or rotating it when needed, and returns the
// CA state it holds.
func (p *builtinProvider) syncSecret(ctx context.Context) (*caState, error) {
	var state *caState
	retriable := func(err error) bool { return apierrors.IsAlreadyExists(err) || apierrors.IsConflict(err) }
	err := retry.OnError(secretRetry, retriable, func() error {
		var err error
		state, err = p.syncSecretOnce(ctx)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("syncing the webhook CA Secret %s: %w", p.key, err)
	}
	return state, nil
}

func (p *builtinProvider) syncSecretOnce(ctx context.Context) (*caState, error) {
	logger := log.FromContext(ctx).WithValues("secret", p.key)
	secret := &corev1.Secret{}
	err := p.c.Get(ctx, p.key, secret)
	exists := err == nil
	switch {
	case apierrors.IsNotFound(err):
		secret = p.newSecret()
	case err != nil:
		return nil, err
	}

	var current *caState
	if exists {
		current, err = decodeCAState(secret)
		switch {
		case err != nil && len(secret.Data) == 0:
			// The chart creates the Secret empty, so that Helm owns it: filling it in is
			// the first start, not a repair.
			logger.Info("Creating the webhook CA in the empty Secret")
		case err != nil:
			logger.Error(err, "The webhook CA Secret holds no usable CA, replacing it")
		}
	}
	state, transitions, err := p.policy.step(current, p.opts.Clock.Now())
	if err != nil {
		return nil, err
	}
	if len(transitions) == 0 {
		return state, nil
	}
	state.encodeInto(secret)
	if exists {
		// The resourceVersion read above makes this fail with a conflict when another
		// replica wrote first; the retry then reads what it wrote.
		err = p.c.Update(ctx, secret)
	} else {
		err = p.c.Create(ctx, secret)
	}
	if err != nil {
		return nil, err
	}
	for _, t := range transitions {
		logger.Info("Changed the webhook CA", "transition", string(t),
			"activeCA", state.active.cert.Subject.CommonName, "activeNotAfter", state.active.cert.NotAfter)
	}
	return state, nil
}

func (p *builtinProvider) newSecret() *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: p.key.Namespace,
			Name:      p.key.Name,
			Labels: map[string]string{
				"app.kubernetes.io/name":       "compositor",
				"app.kubernetes.io/component":  "webhook-ca",
				"app.kubernetes.io/managed-by": "compositor",
			},
		},
		Type: corev1.SecretTypeOpaque,
	}
}
