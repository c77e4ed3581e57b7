package certs

import (
	"fmt"
	"time"

	cmv1 "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// InjectCAFromAnnotation asks cert-manager's cainjector to write the CA of the
// Certificate it names, "<namespace>/<name>", into the annotated webhook configuration
// or CRD.
const InjectCAFromAnnotation = cmv1.WantInjectAnnotation

// InjectCAFrom returns the annotations that make cainjector keep an object's CA bundles
// those of the Certificate namespace/certificate.
func InjectCAFrom(namespace, certificate string) map[string]string {
	return map[string]string{InjectCAFromAnnotation: namespace + "/" + certificate}
}

// CertManagerObjectsOptions name the cert-manager objects of the webhook's certificate.
type CertManagerObjectsOptions struct {
	// Namespace is Compositor's namespace, where every object lives.
	Namespace string
	// Service is the webhook Service the certificate is for.
	Service string
	// Name prefixes every object, "compositor-webhook" when empty.
	Name string
	// SecretName is the Secret the serving certificate is written to, which the
	// Deployment mounts for NewCertManager; "<Name>-tls" when empty.
	SecretName string
	// CADuration and Duration are the lifetimes of the CA and of the serving
	// certificate, DefaultCALifetime and DefaultServingLifetime when zero. cert-manager
	// renews each at two thirds of its lifetime.
	CADuration, Duration time.Duration
}

// CertManagerObjects are a self-signed Issuer that signs a CA Certificate, a CA Issuer
// on that CA, and the serving Certificate it issues for the webhook Service.
type CertManagerObjects struct {
	SelfSignedIssuer   *cmv1.Issuer
	CACertificate      *cmv1.Certificate
	CAIssuer           *cmv1.Issuer
	ServingCertificate *cmv1.Certificate
}

// NewCertManagerObjects builds the cert-manager objects for the webhook in
// --certs=cert-manager mode.
func NewCertManagerObjects(o CertManagerObjectsOptions) (*CertManagerObjects, error) {
	if o.Namespace == "" || o.Service == "" {
		return nil, fmt.Errorf("%w: cert-manager objects need a namespace and a Service", ErrInvalidOptions)
	}
	if o.Name == "" {
		o.Name = "compositor-webhook"
	}
	if o.SecretName == "" {
		o.SecretName = o.Name + "-tls"
	}
	if o.CADuration == 0 {
		o.CADuration = DefaultCALifetime
	}
	if o.Duration == 0 {
		o.Duration = DefaultServingLifetime
	}
	meta := func(name string) metav1.ObjectMeta {
		return metav1.ObjectMeta{
			Namespace: o.Namespace,
			Name:      name,
			Labels: map[string]string{
				"app.kubernetes.io/name":      "compositor",
				"app.kubernetes.io/component": "webhook-certificate",
			},
		}
	}
	issuerType := metav1.TypeMeta{APIVersion: cmv1.SchemeGroupVersion.String(), Kind: cmv1.IssuerKind}
	certificateType := metav1.TypeMeta{APIVersion: cmv1.SchemeGroupVersion.String(), Kind: cmv1.CertificateKind}
	issuerRef := func(name string) cmmeta.IssuerReference {
		return cmmeta.IssuerReference{Name: name, Kind: cmv1.IssuerKind, Group: cmv1.SchemeGroupVersion.Group}
	}
	caName := o.Name + "-ca"

	objs := &CertManagerObjects{
		SelfSignedIssuer: &cmv1.Issuer{
			TypeMeta:   issuerType,
			ObjectMeta: meta(o.Name + "-selfsigned"),
			Spec: cmv1.IssuerSpec{IssuerConfig: cmv1.IssuerConfig{
				SelfSigned: &cmv1.SelfSignedIssuer{},
			}},
		},
		CACertificate: &cmv1.Certificate{
			TypeMeta:   certificateType,
			ObjectMeta: meta(caName),
			Spec: cmv1.CertificateSpec{
				IsCA:       true,
				CommonName: caName,
				SecretName: caName,
				Duration:   &metav1.Duration{Duration: o.CADuration},
				// Renewing the CA with its key kept lets the bundle cainjector writes
				// verify serving certificates signed before and after the renewal.
				PrivateKey: &cmv1.CertificatePrivateKey{
					Algorithm:      cmv1.ECDSAKeyAlgorithm,
					Size:           256,
					RotationPolicy: cmv1.RotationPolicyNever,
				},
				IssuerRef: issuerRef(o.Name + "-selfsigned"),
			},
		},
		CAIssuer: &cmv1.Issuer{
			TypeMeta:   issuerType,
			ObjectMeta: meta(caName),
			Spec: cmv1.IssuerSpec{IssuerConfig: cmv1.IssuerConfig{
				CA: &cmv1.CAIssuer{SecretName: caName},
			}},
		},
		ServingCertificate: &cmv1.Certificate{
			TypeMeta:   certificateType,
			ObjectMeta: meta(o.Name),
			Spec: cmv1.CertificateSpec{
				CommonName: o.Service + "." + o.Namespace + ".svc",
				DNSNames:   ServiceDNSNames(o.Service, o.Namespace),
				SecretName: o.SecretName,
				Duration:   &metav1.Duration{Duration: o.Duration},
				PrivateKey: &cmv1.CertificatePrivateKey{
					Algorithm:      cmv1.ECDSAKeyAlgorithm,
					Size:           256,
					RotationPolicy: cmv1.RotationPolicyAlways,
				},
				Usages:    []cmv1.KeyUsage{cmv1.UsageDigitalSignature, cmv1.UsageServerAuth},
				IssuerRef: issuerRef(caName),
			},
		},
	}
	return objs, nil
}

// List returns the objects in the order they depend on each other.
func (o *CertManagerObjects) List() []client.Object {
	return []client.Object{o.SelfSignedIssuer, o.CACertificate, o.CAIssuer, o.ServingCertificate}
}

// InjectCAFrom returns the annotations that make cainjector inject the serving
// certificate's CA.
func (o *CertManagerObjects) InjectCAFrom() map[string]string {
	return InjectCAFrom(o.ServingCertificate.Namespace, o.ServingCertificate.Name)
}
