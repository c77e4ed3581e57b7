// Package webhookclient mints the client certificate an API server presents to
// admission webhooks, and writes the kubeconfig and AdmissionConfiguration that make
// kube-apiserver present it: what `compositor dev` and the tests' control plane give
// their API server, so that a webhook server started with --webhook-client-ca hears
// it. It is apart from package certs, whose tests start that control plane.
package webhookclient

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Name is the common name of the client certificate that
// WriteAPIServerClient mints for the API server to present to the webhooks.
const Name = "kube-apiserver-webhook-client"

// lifetime is how long the CA and the client certificate of a local control plane
// live: they are minted again at every start.
const lifetime = 365 * 24 * time.Hour

// backdate starts them a little before now, for an API server whose clock runs behind.
const backdate = 5 * time.Minute

// Files are the files that give an API server a client certificate to
// present to admission webhooks, as Write wrote them.
type Files struct {
	// CAFile is the PEM CA that signed the client certificate: what the webhook
	// server verifies its callers against (--webhook-client-ca).
	CAFile string
	// CertFile and KeyFile are the client certificate and its key, in PEM.
	CertFile, KeyFile string
	// Kubeconfig names the certificate for every webhook (a users entry named "*"):
	// the kubeConfigFile of the AdmissionConfiguration.
	Kubeconfig string
	// AdmissionConfig is an AdmissionConfiguration whose ValidatingAdmissionWebhook
	// and MutatingAdmissionWebhook plugins read Kubeconfig: the API server's
	// --admission-control-config-file.
	AdmissionConfig string
}

// Write creates a CA in dir and a client certificate for
// Name signed by it, and writes the kubeconfig and the
// AdmissionConfiguration through which kube-apiserver presents that certificate to
// admission webhooks. The API server presents no client certificate to CRD conversion
// webhooks: their client reads no configuration.
func Write(dir string) (*Files, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	now := time.Now()
	caKey, caCert, caPEM, err := newCA(now)
	if err != nil {
		return nil, err
	}
	certPEM, keyPEM, err := newClientCertificate(caKey, caCert, now, Name)
	if err != nil {
		return nil, err
	}
	files := &Files{
		CAFile:          filepath.Join(dir, "ca.crt"),
		CertFile:        filepath.Join(dir, "client.crt"),
		KeyFile:         filepath.Join(dir, "client.key"),
		Kubeconfig:      filepath.Join(dir, "webhook-kubeconfig"),
		AdmissionConfig: filepath.Join(dir, "admission-configuration.yaml"),
	}
	kubeconfig := clientcmdapi.NewConfig()
	kubeconfig.AuthInfos["*"] = &clientcmdapi.AuthInfo{ClientCertificate: files.CertFile, ClientKey: files.KeyFile}
	kubeconfigData, err := clientcmd.Write(*kubeconfig)
	if err != nil {
		return nil, err
	}
	for path, data := range map[string][]byte{
		files.CAFile:          caPEM,
		files.CertFile:        certPEM,
		files.KeyFile:         keyPEM,
		files.Kubeconfig:      kubeconfigData,
		files.AdmissionConfig: AdmissionConfiguration(files.Kubeconfig),
	} {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			return nil, err
		}
	}
	return files, nil
}

// AdmissionConfiguration is an apiserver.config.k8s.io/v1 AdmissionConfiguration
// whose webhook admission plugins take their callers' credentials from kubeconfig.
func AdmissionConfiguration(kubeconfig string) []byte {
	return fmt.Appendf(nil, `apiVersion: apiserver.config.k8s.io/v1
kind: AdmissionConfiguration
plugins:
- name: ValidatingAdmissionWebhook
  configuration:
    apiVersion: apiserver.config.k8s.io/v1
    kind: WebhookAdmissionConfiguration
    kubeConfigFile: %[1]q
- name: MutatingAdmissionWebhook
  configuration:
    apiVersion: apiserver.config.k8s.io/v1
    kind: WebhookAdmissionConfiguration
    kubeConfigFile: %[1]q
`, kubeconfig)
}

// newCA creates a self-signed CA that signs client certificates only.
func newCA(now time.Time) (*ecdsa.PrivateKey, *x509.Certificate, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("generating the CA key: %w", err)
	}
	template := &x509.Certificate{
		SerialNumber:          serialNumber(),
		Subject:               pkix.Name{CommonName: fmt.Sprintf("compositor-webhook-client-ca@%d", now.Unix())},
		NotBefore:             now.Add(-backdate),
		NotAfter:              now.Add(lifetime),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, template, template, key.Public(), key)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("self-signing the CA: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, nil, err
	}
	return key, cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), nil
}

// newClientCertificate issues a TLS client certificate for commonName from the CA, in
// PEM.
func newClientCertificate(caKey *ecdsa.PrivateKey, ca *x509.Certificate, now time.Time, commonName string) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generating the client key: %w", err)
	}
	template := &x509.Certificate{
		SerialNumber:          serialNumber(),
		Subject:               pkix.Name{CommonName: commonName},
		NotBefore:             now.Add(-backdate),
		NotAfter:              ca.NotAfter,
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, template, ca, key.Public(), caKey)
	if err != nil {
		return nil, nil, fmt.Errorf("issuing the client certificate: %w", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), nil
}

// serialNumber is a random 128-bit serial number.
func serialNumber() *big.Int {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		panic(err) // crypto/rand does not fail
	}
	return serial
}
