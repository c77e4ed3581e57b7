package certs

import (
	"testing"
	"time"

	cmv1 "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"
)

func TestNewCertManagerObjects(t *testing.T) {
	objs, err := NewCertManagerObjects(CertManagerObjectsOptions{Namespace: "compositor-system", Service: "compositor-webhook"})
	require.NoError(t, err)

	selfSigned, caCert, caIssuer, serving := objs.SelfSignedIssuer, objs.CACertificate, objs.CAIssuer, objs.ServingCertificate
	for _, obj := range objs.List() {
		assert.Equal(t, "compositor-system", obj.GetNamespace())
		assert.Equal(t, "cert-manager.io/v1", obj.GetObjectKind().GroupVersionKind().GroupVersion().String())
	}

	// self-signed Issuer → CA Certificate → CA Issuer → serving Certificate
	assert.NotNil(t, selfSigned.Spec.SelfSigned)
	assert.True(t, caCert.Spec.IsCA)
	assert.Equal(t, selfSigned.Name, caCert.Spec.IssuerRef.Name)
	assert.Equal(t, cmv1.IssuerKind, caCert.Spec.IssuerRef.Kind)
	require.NotNil(t, caIssuer.Spec.CA)
	assert.Equal(t, caCert.Spec.SecretName, caIssuer.Spec.CA.SecretName)
	assert.Equal(t, caIssuer.Name, serving.Spec.IssuerRef.Name)
	assert.Equal(t, cmv1.RotationPolicyNever, caCert.Spec.PrivateKey.RotationPolicy, "the CA keeps its key across renewals")

	assert.False(t, serving.Spec.IsCA)
	assert.Equal(t, "compositor-webhook-tls", serving.Spec.SecretName)
	assert.Equal(t, ServiceDNSNames("compositor-webhook", "compositor-system"), serving.Spec.DNSNames)
	assert.ElementsMatch(t, []cmv1.KeyUsage{cmv1.UsageServerAuth, cmv1.UsageDigitalSignature}, serving.Spec.Usages)
	assert.Equal(t, DefaultServingLifetime, serving.Spec.Duration.Duration)
	assert.Equal(t, DefaultCALifetime, caCert.Spec.Duration.Duration)
	assert.Equal(t, cmv1.ECDSAKeyAlgorithm, serving.Spec.PrivateKey.Algorithm)

	assert.Equal(t, map[string]string{"cert-manager.io/inject-ca-from": "compositor-system/compositor-webhook"}, objs.InjectCAFrom())

	// They serialize as manifests a chart or kubectl can apply.
	manifest, err := yaml.Marshal(serving)
	require.NoError(t, err)
	assert.Contains(t, string(manifest), "kind: Certificate")
	assert.Contains(t, string(manifest), "duration: 2160h0m0s")
}

func TestNewCertManagerObjectsOptions(t *testing.T) {
	objs, err := NewCertManagerObjects(CertManagerObjectsOptions{
		Namespace: "ns", Service: "svc", Name: "hooks", SecretName: "hooks-cert",
		CADuration: 48 * time.Hour, Duration: time.Hour,
	})
	require.NoError(t, err)
	assert.Equal(t, "hooks", objs.ServingCertificate.Name)
	assert.Equal(t, "hooks-cert", objs.ServingCertificate.Spec.SecretName)
	assert.Equal(t, time.Hour, objs.ServingCertificate.Spec.Duration.Duration)
	assert.Equal(t, 48*time.Hour, objs.CACertificate.Spec.Duration.Duration)

	_, err = NewCertManagerObjects(CertManagerObjectsOptions{Namespace: "ns"})
	assert.ErrorIs(t, err, ErrInvalidOptions)
}
