package webhooks

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/compositor-dev/compositor/api/vocab"
	"github.com/compositor-dev/compositor/conversion"
	"github.com/compositor-dev/compositor/conversion/conversiontest"
	"github.com/compositor-dev/compositor/generators/crd"
	"github.com/compositor-dev/compositor/test/controlplane"
)

// loopbackCert is a self-signed serving certificate for 127.0.0.1 and its PEM, the CA
// bundle that trusts it.
func loopbackCert(t *testing.T) (tls.Certificate, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	now := time.Now()
	template := &x509.Certificate{
		SerialNumber:          big.NewInt(now.UnixNano()),
		Subject:               pkix.Name{CommonName: "compositor conversion test"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, template, template, key.Public(), key)
	require.NoError(t, err)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// serveConverter serves the converter over TLS on loopback, with schemas read through
// a CRD cache as in `compositor serve`, and returns its address.
func serveConverter(t *testing.T, cp *controlplane.ControlPlane, cert tls.Certificate) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	scheme := runtime.NewScheme()
	require.NoError(t, apiextensionsv1.AddToScheme(scheme))
	crds, err := cache.New(cp.Config, cache.Options{Scheme: scheme})
	require.NoError(t, err)
	cacheDone := make(chan error, 1)
	go func() { cacheDone <- crds.Start(ctx) }()

	mux := http.NewServeMux()
	mux.Handle(ConvertPath, NewConverter(conversion.NewCRDSchemas(crds, cp.Client)))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := &http.Server{
		Handler:           mux,
		TLSConfig:         &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
		ReadHeaderTimeout: 10 * time.Second,
	}
	serveDone := make(chan error, 1)
	go func() { serveDone <- srv.ServeTLS(ln, "", "") }()
	t.Cleanup(func() {
		require.NoError(t, srv.Close())
		if err := <-serveDone; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("serving: %v", err)
		}
		cancel()
		require.NoError(t, <-cacheDone)
	})
	require.True(t, crds.WaitForCacheSync(ctx))
	return ln.Addr().String()
}

func kubectlYAML(t *testing.T, cp *controlplane.ControlPlane, args ...string) map[string]any {
	t.Helper()
	res := cp.Kubectl(context.Background(), "", append(args, "-o", "yaml")...)
	require.NoError(t, res.Err, res.Stderr)
	out := map[string]any{}
	require.NoError(t, yaml.Unmarshal([]byte(res.Stdout), &out), res.Stdout)
	return out
}

func kubectlApply(t *testing.T, cp *controlplane.ControlPlane, manifest string) {
	t.Helper()
	res := cp.Kubectl(context.Background(), manifest, "apply", "-f", "-")
	require.NoError(t, res.Err, res.Stderr)
}

// TestConversionOnTheAPIServer runs the conversion webhook behind a real API server:
// fields of one chart version survive reads and writes through another, with kubectl.
func TestConversionOnTheAPIServer(t *testing.T) {
	cp := controlplane.Start(t)
	ctx := context.Background()
	cert, caBundle := loopbackCert(t)
	addr := serveConverter(t, cp, cert)

	fireworksCRD, err := conversiontest.FireworksCRD(crd.ConversionWebhook{URL: "https://" + addr + ConvertPath, CABundle: caBundle})
	require.NoError(t, err)
	require.NoError(t, cp.Client.Create(ctx, fireworksCRD))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		for _, v := range []string{"v1-1-5", "v1-1-6", "v2-0-0"} {
			res := cp.Kubectl(ctx, "", "get", "fireworksapps."+v+"."+vocab.CompositionGroup, "-A")
			assert.NoError(c, res.Err, res.Stderr)
		}
	}, time.Minute, 200*time.Millisecond)

	t.Run("exposure survives a write through v1-1-5", func(t *testing.T) {
		kubectlApply(t, cp, `apiVersion: composition.krateo.io/v2-0-0
kind: FireworksApp
metadata:
  name: demo
  namespace: default
spec:
  replicaCount: 2
  exposure: public
  service:
    port: 8080
`)
		old := kubectlYAML(t, cp, "get", "fireworksapps.v1-1-5.composition.krateo.io", "demo", "-n", "default")
		assert.Equal(t, "composition.krateo.io/v1-1-5", old["apiVersion"])
		assert.NotContains(t, conversiontest.Spec(old), "exposure", "v1-1-5 has no exposure")
		stash, _ := stashOf(old)
		assert.Equal(t, `{"/spec/exposure":"public"}`, stash)

		// Client-side apply patches the object the API server reads through v1-1-5,
		// stash included; its patch even deletes exposure, which v1-1-5 does not have.
		kubectlApply(t, cp, `apiVersion: composition.krateo.io/v1-1-5
kind: FireworksApp
metadata:
  name: demo
  namespace: default
spec:
  replicaCount: 3
  service:
    port: 8080
`)
		now := kubectlYAML(t, cp, "get", "fireworksapps.v2-0-0.composition.krateo.io", "demo", "-n", "default")
		assert.Equal(t, map[string]any{"replicaCount": float64(3), "exposure": "public", "service": map[string]any{"port": float64(8080)}}, conversiontest.Spec(now))
		_, stashed := stashOf(now)
		assert.False(t, stashed, "v2-0-0 has every field")

		// An update sends back the whole object read through v1-1-5.
		obj := &unstructured.Unstructured{}
		obj.SetAPIVersion("composition.krateo.io/v1-1-5")
		obj.SetKind("FireworksApp")
		require.NoError(t, cp.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: "demo"}, obj))
		require.NoError(t, unstructured.SetNestedField(obj.Object, int64(4), "spec", "replicaCount"))
		require.NoError(t, cp.Client.Update(ctx, obj))
		now = kubectlYAML(t, cp, "get", "fireworksapps.v2-0-0.composition.krateo.io", "demo", "-n", "default")
		assert.Equal(t, map[string]any{"replicaCount": float64(4), "exposure": "public", "service": map[string]any{"port": float64(8080)}}, conversiontest.Spec(now))
	})

	t.Run("service.type survives a write through v2-0-0", func(t *testing.T) {
		kubectlApply(t, cp, `apiVersion: composition.krateo.io/v1-1-5
kind: FireworksApp
metadata:
  name: classic
  namespace: default
spec:
  service:
    type: NodePort
    port: 80
`)
		v2 := kubectlYAML(t, cp, "get", "fireworksapps.v2-0-0.composition.krateo.io", "classic", "-n", "default")
		assert.Equal(t, map[string]any{"service": map[string]any{"port": float64(80)}}, conversiontest.Spec(v2))

		kubectlApply(t, cp, `apiVersion: composition.krateo.io/v2-0-0
kind: FireworksApp
metadata:
  name: classic
  namespace: default
spec:
  exposure: internal
  service:
    port: 80
`)
		v115 := kubectlYAML(t, cp, "get", "fireworksapps.v1-1-5.composition.krateo.io", "classic", "-n", "default")
		assert.Equal(t, map[string]any{"service": map[string]any{"type": "NodePort", "port": float64(80)}}, conversiontest.Spec(v115))
		stash, _ := stashOf(v115)
		assert.Equal(t, `{"/spec/exposure":"internal"}`, stash)
	})

	t.Run("kubectl get without a version reads the alphabetically first served version", func(t *testing.T) {
		// Kubernetes prefers Kube-like versions (v1, v2beta1) by priority and orders the
		// others alphabetically, so of v1-1-5, v1-1-6 and v2-0-0 the oldest is preferred
		// (and v10-0-0 would sort before v2-0-0). Name the version to read another.
		res := cp.Kubectl(ctx, "", "get", "fireworksapps", "demo", "-n", "default", "-o", "jsonpath={.apiVersion}")
		require.NoError(t, res.Err, res.Stderr)
		assert.Equal(t, "composition.krateo.io/v1-1-5", res.Stdout)
	})

	t.Run("the hub stays the only stored version", func(t *testing.T) {
		got := &apiextensionsv1.CustomResourceDefinition{}
		require.NoError(t, cp.Client.Get(ctx, client.ObjectKeyFromObject(fireworksCRD), got))
		assert.Equal(t, []string{crd.HubVersion}, got.Status.StoredVersions)
	})
}
