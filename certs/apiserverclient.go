package certs

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// APIServerClientName is the common name of the client certificate that
// WriteAPIServerClient mints for the API server to present to the webhooks.
const APIServerClientName = "kube-apiserver-webhook-client"

// apiServerClientLifetime is how long the CA and the client certificate of a local
// control plane live: it is minted again at every start.
const apiServerClientLifetime = 365 * 24 * time.Hour

// APIServerClient are the files that give an API server a client certificate to
// present to admission webhooks, as WriteAPIServerClient wrote them.
type APIServerClient struct {
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

// WriteAPIServerClient creates a CA in dir and a client certificate for
// APIServerClientName signed by it, and writes the kubeconfig and the
// AdmissionConfiguration through which kube-apiserver presents that certificate to
// admission webhooks. The API server presents no client certificate to CRD conversion
// webhooks: their client reads no configuration.
func WriteAPIServerClient(dir string) (*APIServerClient, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	now := time.Now()
	ca, err := newCA(now, apiServerClientLifetime)
	if err != nil {
		return nil, err
	}
	certPEM, keyPEM, err := newClientCertificate(ca, now, APIServerClientName)
	if err != nil {
		return nil, err
	}
	files := &APIServerClient{
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
		files.CAFile:          ca.certPEM,
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

// newClientCertificate issues a TLS client certificate for commonName from ca, in PEM.
func newClientCertificate(ca *keyPair, now time.Time, commonName string) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generating the client key: %w", err)
	}
	serial, err := newSerialNumber()
	if err != nil {
		return nil, nil, err
	}
	template := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: commonName},
		NotBefore:             now.Add(-backdate(apiServerClientLifetime)),
		NotAfter:              minTime(now.Add(apiServerClientLifetime), ca.cert.NotAfter),
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, template, ca.cert, key.Public(), ca.key)
	if err != nil {
		return nil, nil, fmt.Errorf("issuing the client certificate: %w", err)
	}
	pair, err := newKeyPair(der, key)
	if err != nil {
		return nil, nil, err
	}
	return pair.certPEM, pair.keyPEM, nil
}
