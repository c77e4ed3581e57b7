package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/compositor-dev/compositor/certs/webhookclient"
	"github.com/compositor-dev/compositor/cmd/compositor/app"
	"github.com/compositor-dev/compositor/test/controlplane"
	"github.com/compositor-dev/compositor/webhooks"
)

// unauthenticated reads compositor_webhook_unauthenticated_total{reason} from the
// registry that /metrics serves.
func unauthenticated(t *testing.T, reason string) float64 {
	t.Helper()
	families, err := metrics.Registry.Gather()
	require.NoError(t, err)
	for _, family := range families {
		if family.GetName() != "compositor_webhook_unauthenticated_total" {
			continue
		}
		for _, m := range family.GetMetric() {
			for _, label := range m.GetLabel() {
				if label.GetName() == "reason" && label.GetValue() == reason {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// webhookCaller posts to the webhook server at base, trusting its CA bundle, as a
// caller with the given client certificate (none when certFile is empty).
func webhookCaller(t *testing.T, bundle []byte, certFile, keyFile string) *http.Client {
	t.Helper()
	roots := x509.NewCertPool()
	require.True(t, roots.AppendCertsFromPEM(bundle))
	config := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	if certFile != "" {
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		require.NoError(t, err)
		config.Certificates = []tls.Certificate{cert}
	}
	transport := &http.Transport{TLSClientConfig: config, DisableKeepAlives: true}
	t.Cleanup(transport.CloseIdleConnections)
	return &http.Client{Transport: transport, Timeout: time.Minute}
}

// Issue 46, item 3: with --webhook-client-ca the admission webhooks hear the API
// server, which presents the client certificate of its AdmissionConfiguration
// (controlplane.Start configures it), and refuse every other caller before reading
// its request, counting the refusal.
func TestOnlyTheAPIServerIsHeard(t *testing.T) {
	cp := controlplane.Start(t)
	var base string
	startCompositor(t, cp, func(o *app.ServeOptions) {
		o.WebhookClientCA = cp.WebhookClient.CAFile
		o.WebhookClientNames = []string{webhookclient.Name}
		base = o.WebhookURL
	})
	ctx := context.Background()

	// The API server's own writes pass both webhooks: a composition is defaulted by
	// /mutate, and a policy whose Rego does not compile is refused by /validate.
	res := cp.Kubectl(ctx, "", "apply", "-f", fixture("demoapps-crd.yaml"))
	require.NoError(t, res.Err, res.Stderr)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		res := cp.Kubectl(ctx, "", "apply", "-f", fixture("demoapp.yaml"))
		assert.NoError(c, res.Err, res.Stderr)
	}, time.Minute, 200*time.Millisecond)
	assert.Equal(t, "demo", getComposition(t, cp, "default", "demo").GetAnnotations()["krateo.io/release-name"])
	res = cp.Kubectl(ctx, `apiVersion: policy.compositor.dev/v1alpha1
kind: CompositionPolicy
metadata: {name: broken}
spec: {rego: "package broken\n\nthis is not Rego {"}
`, "create", "-f", "-")
	require.Error(t, res.Err)
	// Only the webhook parses Rego.
	assert.Contains(t, res.Stderr, `spec.rego: Invalid value: 3:18: rego_parse_error`)

	validating := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	require.NoError(t, cp.Client.Get(ctx, client.ObjectKey{Name: webhooks.ConfigurationName}, validating))
	bundle := validating.Webhooks[0].ClientConfig.CABundle

	// Not JSON: decoded, it is answered 400 with an AdmissionReview saying so.
	notJSON := []byte(`{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {`)
	post := func(t *testing.T, caller *http.Client, path string, body []byte) (*http.Response, string, error) {
		t.Helper()
		resp, err := caller.Post(base+path, "application/json", bytes.NewReader(body))
		if err != nil {
			return nil, "", err
		}
		defer func() { _ = resp.Body.Close() }()
		data, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp, string(data), nil
	}

	t.Run("the API server's certificate is heard and its body decoded", func(t *testing.T) {
		caller := webhookCaller(t, bundle, cp.WebhookClient.CertFile, cp.WebhookClient.KeyFile)
		resp, body, err := post(t, caller, webhooks.ValidatePath, notJSON)
		require.NoError(t, err)
		assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
		assert.Contains(t, body, "the body is not an AdmissionReview")
	})

	t.Run("no certificate is refused before decoding", func(t *testing.T) {
		caller := webhookCaller(t, bundle, "", "")
		for _, path := range []string{webhooks.MutatePath, webhooks.ValidatePath, webhooks.StatusPath} {
			before := unauthenticated(t, "no-certificate")
			resp, body, err := post(t, caller, path, notJSON)
			require.NoError(t, err)
			assert.Equal(t, http.StatusForbidden, resp.StatusCode, path)
			// Not an AdmissionReview: nothing read the body.
			assert.NotContains(t, body, "AdmissionReview", path)
			assert.Contains(t, body, "a client certificate signed by the webhook client CA is required", path)
			assert.Equal(t, before+1, unauthenticated(t, "no-certificate"), path)
		}
	})

	// One request per connection: HTTP/2's streams would let one connection hold as
	// many refusals as the server lets wait.
	t.Run("the webhooks speak HTTP/1.1 only", func(t *testing.T) {
		roots := x509.NewCertPool()
		require.True(t, roots.AppendCertsFromPEM(bundle))
		conn, err := tls.Dial("tcp", strings.TrimPrefix(base, "https://"), &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12, NextProtos: []string{"h2", "http/1.1"}})
		require.NoError(t, err)
		defer func() { _ = conn.Close() }()
		assert.Equal(t, "http/1.1", conn.ConnectionState().NegotiatedProtocol)
	})

	t.Run("a certificate of another CA is refused at the handshake", func(t *testing.T) {
		other, err := webhookclient.Write(filepath.Join(t.TempDir(), "other"))
		require.NoError(t, err)
		caller := webhookCaller(t, bundle, other.CertFile, other.KeyFile)
		before := unauthenticated(t, "untrusted-certificate")
		_, _, err = post(t, caller, webhooks.ValidatePath, notJSON)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "tls")
		assert.Equal(t, before+1, unauthenticated(t, "untrusted-certificate"))
	})

	// The API server presents no client certificate to CRD conversion webhooks (its
	// conversion client reads no AdmissionConfiguration), so /convert hears a caller
	// without one: it has no side effects, and its work is bounded per request.
	t.Run("conversion takes callers without a certificate", func(t *testing.T) {
		caller := webhookCaller(t, bundle, "", "")
		resp, body, err := post(t, caller, webhooks.ConvertPath, []byte(`{"apiVersion":"apiextensions.k8s.io/v1","kind":"ConversionReview","request":{"uid":"u1","desiredAPIVersion":"composition.krateo.io/v1-1-5","objects":[]}}`))
		require.NoError(t, err)
		assert.Equal(t, http.StatusOK, resp.StatusCode, body)
		review := map[string]any{}
		require.NoError(t, json.Unmarshal([]byte(body), &review), body)
		assert.Equal(t, "ConversionReview", review["kind"])
		assert.True(t, strings.Contains(body, `"uid":"u1"`), body)
	})
}
