package e2e

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/compositor-dev/compositor/api"
	"github.com/compositor-dev/compositor/api/crds"
	"github.com/compositor-dev/compositor/test/controlplane"
)

// restartableControlPlane is an etcd and a kube-apiserver from bin/k8s that a test
// can stop (SIGTERM or SIGKILL) and start again with the same data, ports and
// certificates, so that the kubeconfig Compositor and the test hold stays valid.
// envtest starts the same binaries, but picks new ports, a new client CA and, for a
// directory of its own, a new data directory at every start, and stops with SIGTERM
// only.
type restartableControlPlane struct {
	t *testing.T
	// cp is what the e2e helpers take: admin config, client, kubeconfig.
	cp                      *controlplane.ControlPlane
	cfg                     *rest.Config
	dir, dataDir            string
	etcdURL, etcdPeerURL    string
	apiAddr                 string
	etcd, apiServer         *exec.Cmd
	etcdExited, apiExited   chan struct{}
	etcdRuns, apiServerRuns int
}

// startRestartableControlPlane starts etcd and kube-apiserver with data and
// certificates in directories of the test, installs Compositor's CRDs, and stops both
// when the test ends.
func startRestartableControlPlane(t *testing.T) *restartableControlPlane {
	t.Helper()
	controlplane.Require(t, "etcd", "kube-apiserver", "kubectl")
	p := &restartableControlPlane{
		t: t, dir: t.TempDir(), dataDir: t.TempDir(),
		etcdURL: "http://" + freePort(t), etcdPeerURL: "http://" + freePort(t), apiAddr: freePort(t),
	}
	t.Cleanup(func() { p.stop(syscall.SIGTERM) })
	cfg := p.writeCertificates()
	p.cfg = cfg

	kubeconfig := clientcmdapi.NewConfig()
	kubeconfig.Clusters["restartable"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kubeconfig.AuthInfos["test-admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData}
	kubeconfig.Contexts["restartable"] = &clientcmdapi.Context{Cluster: "restartable", AuthInfo: "test-admin"}
	kubeconfig.CurrentContext = "restartable"
	path := filepath.Join(p.dir, "kubeconfig")
	require.NoError(t, clientcmd.WriteToFile(*kubeconfig, path))

	require.NoError(t, p.start())
	ownCRDs, err := crds.All()
	require.NoError(t, err)
	_, err = envtest.InstallCRDs(cfg, envtest.CRDInstallOptions{CRDs: ownCRDs})
	require.NoError(t, err, "installing Compositor's CRDs")
	scheme, err := api.NewScheme()
	require.NoError(t, err)
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	require.NoError(t, err)
	p.cp = &controlplane.ControlPlane{Config: cfg, Client: c, Kubeconfig: path}
	return p
}

// start starts etcd, then kube-apiserver, and waits until both answer healthy, for
// at most two minutes each. It does not fail the test, so that a goroutine may call it.
func (p *restartableControlPlane) start() error {
	var err error
	p.etcdRuns++
	p.etcd, p.etcdExited, err = p.run("etcd", p.etcdRuns,
		"--name=default", "--data-dir="+p.dataDir,
		"--listen-client-urls="+p.etcdURL, "--advertise-client-urls="+p.etcdURL,
		"--listen-peer-urls="+p.etcdPeerURL, "--initial-advertise-peer-urls="+p.etcdPeerURL,
		"--initial-cluster=default="+p.etcdPeerURL)
	if err != nil {
		return err
	}
	if err := p.waitHealthy("etcd", p.etcdExited, &http.Client{}, p.etcdURL+"/health"); err != nil {
		return err
	}

	p.apiServerRuns++
	_, port, _ := net.SplitHostPort(p.apiAddr)
	certs := func(name string) string { return filepath.Join(p.dir, name) }
	p.apiServer, p.apiExited, err = p.run("kube-apiserver", p.apiServerRuns,
		"--etcd-servers="+p.etcdURL,
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", "--secure-port="+port,
		"--tls-cert-file="+certs("apiserver.crt"), "--tls-private-key-file="+certs("apiserver.key"),
		"--client-ca-file="+certs("ca.crt"), "--cert-dir="+p.dir,
		"--authorization-mode=RBAC", "--allow-privileged=true",
		"--disable-admission-plugins=ServiceAccount", "--service-cluster-ip-range=10.0.0.0/24",
		"--service-account-issuer=https://"+p.apiAddr+"/",
		// Close the watches on SIGTERM, Compositor's among them, rather than wait for
		// their timeouts of minutes: without it the API server outlives stopGrace.
		"--shutdown-watch-termination-grace-period=10s",
		"--service-account-key-file="+certs("sa.key"), "--service-account-signing-key-file="+certs("sa.key"))
	if err != nil {
		return err
	}
	tlsConfig, err := rest.TLSConfigFor(p.cfg)
	if err != nil {
		return err
	}
	return p.waitHealthy("kube-apiserver", p.apiExited, &http.Client{Transport: &http.Transport{TLSClientConfig: tlsConfig}}, "https://"+p.apiAddr+"/readyz")
}

func (p *restartableControlPlane) adminConfig() *rest.Config {
	read := func(name string) []byte {
		data, err := os.ReadFile(filepath.Join(p.dir, name))
		require.NoError(p.t, err)
		return data
	}
	return &rest.Config{
		Host:            "https://" + p.apiAddr,
		TLSClientConfig: rest.TLSClientConfig{CAData: read("ca.crt"), CertData: read("admin.crt"), KeyData: read("admin.key")},
		QPS:             1000, Burst: 2000,
	}
}

// stopGrace is how long stop waits for a process to end after SIGTERM before it
// dumps its goroutines (SIGQUIT, into its log) and then kills it (SIGKILL).
const stopGrace = 20 * time.Second

// stop sends sig to kube-apiserver and etcd, in that order, and waits until both
// have ended; SIGKILL goes to etcd first, so that the API server may see it gone. It
// reports the processes that outlived stopGrace after SIGTERM, and had to be killed.
func (p *restartableControlPlane) stop(sig syscall.Signal) (killed []string) {
	type proc struct {
		cmd    *exec.Cmd
		exited chan struct{}
	}
	procs := []proc{{p.apiServer, p.apiExited}, {p.etcd, p.etcdExited}}
	if sig == syscall.SIGKILL {
		procs[0], procs[1] = procs[1], procs[0]
	}
	for _, pr := range procs {
		if pr.cmd == nil {
			continue
		}
		_ = pr.cmd.Process.Signal(sig)
		select {
		case <-pr.exited:
		case <-time.After(stopGrace):
			killed = append(killed, filepath.Base(pr.cmd.Path))
			_ = pr.cmd.Process.Signal(syscall.SIGQUIT)
			select {
			case <-pr.exited:
			case <-time.After(10 * time.Second):
			}
			_ = pr.cmd.Process.Kill()
			<-pr.exited
		}
	}
	p.apiServer, p.etcd = nil, nil
	return killed
}

// run starts binary of bin/k8s with args, its output in a log file of the test.
func (p *restartableControlPlane) run(binary string, run int, args ...string) (*exec.Cmd, chan struct{}, error) {
	log, err := os.Create(filepath.Join(p.dir, fmt.Sprintf("%s-%d.log", binary, run)))
	if err != nil {
		return nil, nil, err
	}
	cmd := exec.Command(filepath.Join(controlplane.BinDir(), binary), args...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		_ = log.Close()
		return nil, nil, err
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); _ = log.Close(); close(exited) }()
	return cmd, exited, nil
}

// waitHealthy waits until url answers 200, for at most two minutes; it fails with the
// end of the log if the process ends first or the deadline passes.
func (p *restartableControlPlane) waitHealthy(binary string, exited chan struct{}, c *http.Client, url string) error {
	c.Timeout = 2 * time.Second
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if res, err := c.Get(url); err == nil {
			_ = res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-exited:
			return fmt.Errorf("%s ended before it was healthy: %s", binary, p.logTail(binary))
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not healthy at %s within two minutes: %s", binary, url, p.logTail(binary))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (p *restartableControlPlane) logTail(binary string) string {
	run := p.etcdRuns
	if binary == "kube-apiserver" {
		run = p.apiServerRuns
	}
	data, _ := os.ReadFile(filepath.Join(p.dir, fmt.Sprintf("%s-%d.log", binary, run)))
	return string(data[max(0, len(data)-3000):])
}

// writeCertificates writes a CA, the API server's serving certificate, an admin
// client certificate (system:masters) and the service account key to p.dir, and
// returns the admin config.
func (p *restartableControlPlane) writeCertificates() *rest.Config {
	p.t.Helper()
	write := func(name, kind string, der []byte) {
		require.NoError(p.t, os.WriteFile(filepath.Join(p.dir, name), pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600))
	}
	newKey := func(name string) *ecdsa.PrivateKey {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		require.NoError(p.t, err)
		der, err := x509.MarshalECPrivateKey(key)
		require.NoError(p.t, err)
		write(name, "EC PRIVATE KEY", der)
		return key
	}
	serial := int64(0)
	sign := func(name string, template *x509.Certificate, key *ecdsa.PrivateKey, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) *x509.Certificate {
		serial++
		template.SerialNumber = big.NewInt(serial)
		template.NotBefore, template.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour)
		if parent == nil {
			parent, parentKey = template, key
		}
		der, err := x509.CreateCertificate(rand.Reader, template, parent, key.Public(), parentKey)
		require.NoError(p.t, err)
		write(name, "CERTIFICATE", der)
		cert, err := x509.ParseCertificate(der)
		require.NoError(p.t, err)
		return cert
	}
	caKey := newKey("ca.key")
	ca := sign("ca.crt", &x509.Certificate{
		Subject: pkix.Name{CommonName: "restartable-ca"}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}, caKey, nil, nil)
	sign("apiserver.crt", &x509.Certificate{
		Subject: pkix.Name{CommonName: "kube-apiserver"}, DNSNames: []string{"localhost", "kubernetes", "kubernetes.default"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("10.0.0.1")},
		KeyUsage:    x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}, newKey("apiserver.key"), ca, caKey)
	sign("admin.crt", &x509.Certificate{
		Subject:  pkix.Name{CommonName: "test-admin", Organization: []string{"system:masters"}},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, newKey("admin.key"), ca, caKey)
	newKey("sa.key")
	return p.adminConfig()
}
