// Package controlplane starts a real kube-apiserver and etcd for tests, through
// controller-runtime's envtest, from the binaries `make control-plane` builds into
// bin/k8s. It installs Compositor's CRDs, writes an admin kubeconfig and runs kubectl
// against it, so tests assert on the state of a real API server.
package controlplane

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"testing"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/compositor-dev/compositor/api"
	"github.com/compositor-dev/compositor/api/crds"
	"github.com/compositor-dev/compositor/certs/webhookclient"
)

// ControlPlane is a running kube-apiserver and etcd with Compositor's CRDs installed.
type ControlPlane struct {
	// Config authenticates as a cluster admin.
	Config *rest.Config
	// Client is a controller-runtime client on Config with Compositor's scheme.
	Client client.Client
	// Kubeconfig is the path of an admin kubeconfig file for kubectl and helm.
	Kubeconfig string
	// WebhookClient is the client certificate the API server presents to admission
	// webhooks (its AdmissionConfiguration); a webhook server started with
	// WebhookClient.CAFile as --webhook-client-ca hears it.
	WebhookClient *webhookclient.Files

	env *envtest.Environment
}

// UserKubeconfig returns a kubeconfig for a new user of the control plane, with a
// client certificate for name in groups, and no rights until RBAC grants them.
func (cp *ControlPlane) UserKubeconfig(t testing.TB, name string, groups ...string) []byte {
	t.Helper()
	if cp.env == nil {
		t.Fatal("UserKubeconfig needs a control plane from Start")
	}
	user, err := cp.env.AddUser(envtest.User{Name: name, Groups: groups}, nil)
	if err != nil {
		t.Fatalf("provisioning user %s: %v", name, err)
	}
	kubeconfig, err := user.KubeConfig()
	if err != nil {
		t.Fatalf("building the kubeconfig of %s: %v", name, err)
	}
	return kubeconfig
}

// RepoRoot is the root of the Compositor checkout these tests run in.
func RepoRoot() string {
	_, file, _, _ := goruntime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// BinDir is where the control plane binaries are: $KUBEBUILDER_ASSETS, or bin/k8s.
func BinDir() string {
	if dir := os.Getenv("KUBEBUILDER_ASSETS"); dir != "" {
		return dir
	}
	return filepath.Join(RepoRoot(), "bin", "k8s")
}

// Require skips the test when the named binaries of BinDir are missing, or fails it
// under CI=true, where a missing control plane is a broken build and not a reason to
// skip.
func Require(t testing.TB, binaries ...string) {
	t.Helper()
	for _, name := range binaries {
		if _, err := os.Stat(filepath.Join(BinDir(), name)); err != nil {
			if os.Getenv("CI") != "" {
				t.Fatalf("%s is missing from %s under CI: `make test` builds it with `make control-plane`", name, BinDir())
			}
			t.Skipf("%s is missing from %s: run `make control-plane` to run this test", name, BinDir())
		}
	}
}

// Start starts a control plane for the test and stops it when the test ends.
func Start(t testing.TB) *ControlPlane {
	t.Helper()
	Require(t, "etcd", "kube-apiserver", "kubectl")

	ownCRDs, err := crds.All()
	if err != nil {
		t.Fatalf("loading Compositor's CRDs: %v", err)
	}
	env := &envtest.Environment{
		BinaryAssetsDirectory: BinDir(),
		CRDs:                  ownCRDs,
	}
	// As on a cluster that authenticates the API server to its webhooks.
	webhookClient, err := webhookclient.Write(filepath.Join(t.TempDir(), "webhook-client"))
	if err != nil {
		t.Fatalf("minting the API server's webhook client certificate: %v", err)
	}
	env.ControlPlane.GetAPIServer().Configure().Set("admission-control-config-file", webhookClient.AdmissionConfig)
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("starting the control plane: %v", err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("stopping the control plane: %v", err)
		}
	})

	scheme, err := api.NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatalf("creating a client: %v", err)
	}

	user, err := env.AddUser(envtest.User{Name: "test-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		t.Fatalf("provisioning the admin user: %v", err)
	}
	kubeconfig, err := user.KubeConfig()
	if err != nil {
		t.Fatalf("building the admin kubeconfig: %v", err)
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, kubeconfig, 0o600); err != nil {
		t.Fatal(err)
	}
	return &ControlPlane{Config: cfg, Client: c, Kubeconfig: path, WebhookClient: webhookClient, env: env}
}

// Result is what a command printed and how it ended.
type Result struct {
	Stdout, Stderr string
	// Err is nil when the command exited 0.
	Err error
}

// Kubectl runs bin/k8s/kubectl with args against the control plane, with stdin as its
// standard input when it is not empty.
func (cp *ControlPlane) Kubectl(ctx context.Context, stdin string, args ...string) Result {
	return cp.run(ctx, "kubectl", stdin, args...)
}

// Helm runs bin/k8s/helm with args against the control plane.
func (cp *ControlPlane) Helm(ctx context.Context, args ...string) Result {
	return cp.run(ctx, "helm", "", args...)
}

func (cp *ControlPlane) run(ctx context.Context, binary, stdin string, args ...string) Result {
	cmd := exec.CommandContext(ctx, filepath.Join(BinDir(), binary), args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+cp.Kubeconfig)
	if stdin != "" {
		cmd.Stdin = bytes.NewBufferString(stdin)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	return Result{Stdout: stdout.String(), Stderr: stderr.String(), Err: err}
}
