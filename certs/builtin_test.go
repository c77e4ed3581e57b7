package certs

import (
	"bytes"
	"context"
	"crypto/x509"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/compositor-dev/compositor/test/controlplane"
)

func TestBuiltinOptionsDefaults(t *testing.T) {
	opts, err := BuiltinOptions{Namespace: "ns", DNSNames: []string{"svc"}}.withDefaults()
	require.NoError(t, err)
	assert.Equal(t, DefaultCASecretName, opts.SecretName)
	assert.Equal(t, DefaultCALifetime, opts.CALifetime)
	assert.Equal(t, DefaultServingLifetime, opts.ServingLifetime)
	assert.InDelta(t, 2.0/3, opts.RenewFraction, 1e-9)
	assert.InDelta(t, float64(DefaultCALifetime)/6, float64(opts.CAOverlap), float64(time.Second))
	assert.Equal(t, DefaultResyncInterval, opts.ResyncInterval)

	short, err := BuiltinOptions{Namespace: "ns", DNSNames: []string{"svc"}, CALifetime: 8 * time.Second}.withDefaults()
	require.NoError(t, err)
	assert.Less(t, short.ResyncInterval, short.CAOverlap, "short lifetimes resync within the overlap")

	for name, opts := range map[string]BuiltinOptions{
		"no namespace":          {DNSNames: []string{"svc"}},
		"no name":               {Namespace: "ns"},
		"fraction above one":    {Namespace: "ns", DNSNames: []string{"svc"}, RenewFraction: 1.5},
		"overlap past expiry":   {Namespace: "ns", DNSNames: []string{"svc"}, CALifetime: time.Hour, CAOverlap: time.Hour},
		"resync beyond overlap": {Namespace: "ns", DNSNames: []string{"svc"}, CAOverlap: time.Hour, ResyncInterval: 2 * time.Hour},
	} {
		_, err := opts.withDefaults()
		assert.ErrorIs(t, err, ErrInvalidOptions, name)
	}
}

func TestNewBuiltinRequiresAClient(t *testing.T) {
	_, err := NewBuiltin(nil, BuiltinOptions{Namespace: "ns", DNSNames: []string{"svc"}})
	assert.ErrorIs(t, err, ErrInvalidOptions)
}

// TestBuiltinOnControlPlane runs the built-in CA against a real API server; each
// subtest has its own namespace.
func TestBuiltinOnControlPlane(t *testing.T) {
	cp := controlplane.Start(t)

	t.Run("replicas starting at once share one CA", func(t *testing.T) {
		ctx := t.Context()
		ns := newNamespace(t, cp.Client)
		const replicas = 8
		providers := make([]Provider, replicas)
		for i := range providers {
			var err error
			providers[i], err = NewBuiltin(cp.Client, BuiltinOptions{Namespace: ns, DNSNames: ServiceDNSNames("compositor-webhook", ns)})
			require.NoError(t, err)
		}
		start := make(chan struct{})
		errs := make([]error, replicas)
		var wg sync.WaitGroup
		for i, p := range providers {
			wg.Go(func() {
				<-start
				errs[i] = p.Ensure(ctx)
			})
		}
		close(start)
		wg.Wait()
		for i, err := range errs {
			require.NoError(t, err, "replica %d", i)
		}

		secrets := &corev1.SecretList{}
		require.NoError(t, cp.Client.List(ctx, secrets, client.InNamespace(ns)))
		require.Len(t, secrets.Items, 1)
		assert.Equal(t, DefaultCASecretName, secrets.Items[0].Name)
		stored := secrets.Items[0].Data[secretKeyCACert]

		for i, p := range providers {
			assert.Equal(t, stored, p.CABundle(), "replica %d trusts the stored CA", i)
			cert, err := p.GetCertificate(nil)
			require.NoError(t, err)
			roots := x509.NewCertPool()
			require.True(t, roots.AppendCertsFromPEM(p.CABundle()))
			_, err = cert.Leaf.Verify(x509.VerifyOptions{DNSName: "compositor-webhook." + ns + ".svc", Roots: roots})
			assert.NoError(t, err, "replica %d", i)
		}
	})

	t.Run("a replica picks up a CA another replica rotated", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), hangGuard)
		defer cancel()
		ns := newNamespace(t, cp.Client)
		opts := BuiltinOptions{Namespace: ns, DNSNames: []string{"localhost"}, CALifetime: time.Hour, ResyncInterval: 50 * time.Millisecond}

		// rotator's clock runs ahead; follower rotates nothing, it only re-reads the Secret.
		clock := clocktesting.NewFakeClock(time.Now())
		rotatorOpts := opts
		rotatorOpts.Clock = clock
		rotator, err := NewBuiltin(cp.Client, rotatorOpts)
		require.NoError(t, err)
		require.NoError(t, rotator.Ensure(ctx))
		follower, err := NewBuiltin(cp.Client, opts)
		require.NoError(t, err)
		require.NoError(t, follower.Ensure(ctx))
		first := bundleOf(t, follower.CABundle())
		require.Len(t, first, 1)

		bundles := make(chan []byte, 10)
		follower.Subscribe(func(bundle []byte) { bundles <- bundle })
		<-bundles // the current one
		started := make(chan error, 1)
		go func() { started <- follower.Start(ctx) }()

		// The rotator publishes a second CA: the follower trusts both.
		clock.Step(40 * time.Minute) // past two thirds of the CA's life
		require.NoError(t, rotator.Ensure(ctx))
		published := bundleOf(t, receive(ctx, t, bundles))
		require.Len(t, published, 2)
		assert.True(t, published[0].Equal(first[0]))
		assert.Equal(t, rotator.CABundle(), follower.CABundle())
		second := published[1]

		// The rotator switches to it: the follower serves a certificate from it.
		clock.Step(11 * time.Minute) // past the overlap, a sixth of its life
		require.NoError(t, rotator.Ensure(ctx))
		switched := bundleOf(t, receive(ctx, t, bundles))
		assert.True(t, switched[0].Equal(second), "the active CA comes first")
		for {
			cert, err := follower.GetCertificate(nil)
			require.NoError(t, err)
			if bytes.Equal(cert.Leaf.AuthorityKeyId, second.SubjectKeyId) {
				break
			}
			select {
			case <-ctx.Done():
				t.Fatal("the follower never switched to the rotated CA")
			case <-time.After(10 * time.Millisecond):
			}
		}

		cancel()
		require.NoError(t, <-started)
	})

	t.Run("HTTPS clients keep working across rotations", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), hangGuard)
		defer cancel()
		ns := newNamespace(t, cp.Client)
		// A serving certificate lives 4s and is replaced after 2s; a CA lives 20s, its
		// successor is published after 10s, issues 3s later and the old CA leaves 3s
		// after that.
		p, err := NewBuiltin(cp.Client, BuiltinOptions{
			Namespace:       ns,
			DNSNames:        []string{"localhost"},
			IPAddresses:     []net.IP{net.IPv4(127, 0, 0, 1)},
			CALifetime:      20 * time.Second,
			ServingLifetime: 4 * time.Second,
			RenewFraction:   0.5,
			CAOverlap:       3 * time.Second,
			ResyncInterval:  250 * time.Millisecond,
		})
		require.NoError(t, err)
		require.NoError(t, p.Ensure(ctx))
		var trust trustStore
		p.Subscribe(trust.set)
		started := make(chan error, 1)
		go func() { started <- p.Start(ctx) }()
		url := startTLSServer(t, p.GetCertificate)

		var (
			requests, serialChanges, caChanges int
			failures                           []error
			lastSerial, lastIssuer             []byte
			retiredAfterSwitch                 bool
		)
		for serialChanges < 2 || caChanges < 1 || !retiredAfterSwitch {
			if ctx.Err() != nil {
				t.Fatalf("gave up after %d requests: %d serial changes, %d CA changes, old CA retired: %t, failures: %v",
					requests, serialChanges, caChanges, retiredAfterSwitch, failures)
			}
			time.Sleep(20 * time.Millisecond) // pacing, to leave the CPU to the server
			requests++
			served, err := servedCertificate(ctx, url, trust.get())
			if err != nil {
				failures = append(failures, err)
				continue
			}
			if lastSerial != nil && !bytes.Equal(lastSerial, served.SerialNumber.Bytes()) {
				serialChanges++
			}
			if lastIssuer != nil && !bytes.Equal(lastIssuer, served.AuthorityKeyId) {
				caChanges++
			}
			lastSerial, lastIssuer = served.SerialNumber.Bytes(), served.AuthorityKeyId
			if caChanges > 0 && len(bundleOf(t, p.CABundle())) == 1 {
				retiredAfterSwitch = true
			}
		}
		t.Logf("%d requests, %d serial changes, %d CA changes", requests, serialChanges, caChanges)
		assert.Empty(t, failures, "requests failed during rotations")

		cancel()
		require.NoError(t, <-started)
	})

	t.Run("an unusable Secret is replaced", func(t *testing.T) {
		ctx := t.Context()
		ns := newNamespace(t, cp.Client)
		require.NoError(t, cp.Client.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: DefaultCASecretName},
			Data:       map[string][]byte{secretKeyCACert: []byte("not a certificate")},
		}))
		p, err := NewBuiltin(cp.Client, BuiltinOptions{Namespace: ns, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}})
		require.NoError(t, err)
		require.NoError(t, p.Ensure(ctx))
		assert.Len(t, bundleOf(t, p.CABundle()), 1)
	})
}

// receive waits for the next value of ch.
func receive[T any](ctx context.Context, t *testing.T, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-ctx.Done():
		t.Fatal("waited in vain")
		panic("unreachable")
	}
}

// newNamespace creates a namespace for one test.
func newNamespace(t *testing.T, c client.Client) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "certs-"}}
	require.NoError(t, c.Create(t.Context(), ns))
	return ns.Name
}
