package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/compositor-dev/compositor/api/crds"
	"github.com/compositor-dev/compositor/certs/webhookclient"
	"github.com/compositor-dev/compositor/chartfetch"
	"github.com/compositor-dev/compositor/samples"
)

// DevOptions configure `compositor dev`: a local control plane with Compositor in it.
type DevOptions struct {
	// Kubeconfig is where the admin kubeconfig of the local control plane is written.
	Kubeconfig string
	// ControlPlaneDir holds the etcd and kube-apiserver binaries.
	ControlPlaneDir string
	// DataDir keeps etcd's data, so that a restarted dev finds what was there, and the
	// webhook address chosen for port 0, so that the generated CRDs' conversion webhooks
	// stay right across restarts.
	DataDir string
	// Reset empties DataDir before starting.
	Reset bool
	// ChartRepositoryAddr is where the sample charts are served as a Helm repository;
	// empty turns it off.
	ChartRepositoryAddr string
	// Serve configures the Compositor that runs against the control plane.
	Serve ServeOptions
}

// controlPlaneBinaries are the programs `compositor dev` starts.
var controlPlaneBinaries = []string{"etcd", "kube-apiserver"}

// ErrControlPlaneMissing means the etcd or kube-apiserver binary was not found.
var ErrControlPlaneMissing = errors.New("control plane binaries not found")

func newDevCommand() *cobra.Command {
	opts := &DevOptions{Serve: *NewServeOptions()}
	// Local defaults: loopback only, and out of the way of a cluster's usual ports. Port
	// 0 for the webhooks means a free port, remembered in --data-dir for the next start.
	opts.Serve.HealthProbeAddr = "127.0.0.1:18081"
	opts.Serve.MetricsAddr = "0"
	opts.Serve.WebhookAddr = "127.0.0.1:0"
	opts.Serve.Controllers = ControllersInProcess
	opts.Serve.Multicluster = true
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run a local control plane with Compositor in it, until interrupted",
		Long: `dev starts etcd and kube-apiserver from the control plane directory (built by
'make control-plane'), installs Compositor's CRDs, writes an admin kubeconfig and runs
Compositor against it until Ctrl-C, then stops everything it started.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := opts.Serve.complete(cmd.Flags(), opts.devDefaults); err != nil {
				return err
			}
			return RunDev(cmd.Context(), cmd.OutOrStdout(), opts)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&opts.Kubeconfig, "kubeconfig", filepath.Join(".compositor", "kubeconfig"), "Where to write the admin kubeconfig of the local control plane")
	fs.StringVar(&opts.DataDir, "data-dir", filepath.Join(".compositor", "etcd"), "Where etcd keeps the local control plane's data, and dev the webhook address it chose, across restarts")
	fs.BoolVar(&opts.Reset, "reset", false, "Start from an empty control plane: remove --data-dir first")
	fs.StringVar(&opts.ChartRepositoryAddr, "chart-repository-addr", "127.0.0.1:8879", `Where the sample charts are served as a Helm repository ("" turns it off)`)
	fs.StringVar(&opts.ControlPlaneDir, "control-plane-dir", defaultControlPlaneDir(), "Directory with the etcd and kube-apiserver binaries (env KUBEBUILDER_ASSETS)")
	opts.Serve.AddFlags(fs)
	return cmd
}

// devDefaults fits dev's defaults to the flags given (or set from the environment):
// an explicit flag wins over a default of the mode. dev delivers to target clusters
// by default, which needs the controllers in process; --controllers=deployments alone
// turns that default off rather than failing.
func (o *DevOptions) devDefaults(fs *pflag.FlagSet) {
	if fs.Changed("controllers") && !fs.Changed("multicluster") && o.Serve.Controllers != ControllersInProcess {
		o.Serve.Multicluster = false
	}
}

func defaultControlPlaneDir() string {
	if dir := os.Getenv("KUBEBUILDER_ASSETS"); dir != "" {
		return dir
	}
	return filepath.Join("bin", "k8s")
}

// checkControlPlane reports which control plane binaries are missing from dir.
func checkControlPlane(dir string) error {
	var missing []string
	for _, name := range controlPlaneBinaries {
		if info, err := os.Stat(filepath.Join(dir, name)); err != nil || info.IsDir() {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w in %s (missing %s): run `make control-plane` first, or point --control-plane-dir at them",
			ErrControlPlaneMissing, dir, strings.Join(missing, ", "))
	}
	return nil
}

// RunDev starts the local control plane, writes its kubeconfig, runs Compositor against
// it and stops everything when ctx is done.
func RunDev(ctx context.Context, out io.Writer, opts *DevOptions) (err error) {
	if err := checkControlPlane(opts.ControlPlaneDir); err != nil {
		return err
	}
	ownCRDs, err := crds.All()
	if err != nil {
		return err
	}
	if opts.Reset {
		if err := os.RemoveAll(opts.DataDir); err != nil {
			return fmt.Errorf("--reset: %w", err)
		}
	}
	if err := os.MkdirAll(opts.DataDir, 0o700); err != nil {
		return fmt.Errorf("--data-dir: %w", err)
	}
	env := &envtest.Environment{
		BinaryAssetsDirectory: opts.ControlPlaneDir,
		CRDs:                  ownCRDs,
	}
	env.ControlPlane.Etcd = &envtest.Etcd{DataDir: opts.DataDir}
	// The API server presents a client certificate to the webhooks, minted at every
	// start, and Compositor hears no one else on its admission paths.
	webhookClient, err := webhookclient.Write(filepath.Join(opts.DataDir, "webhook-client"))
	if err != nil {
		return fmt.Errorf("minting the API server's webhook client certificate: %w", err)
	}
	env.ControlPlane.GetAPIServer().Configure().Set("admission-control-config-file", webhookClient.AdmissionConfig)
	cfg, err := env.Start()
	if err != nil {
		return fmt.Errorf("starting the local control plane: %w", err)
	}
	defer func() {
		if stopErr := env.Stop(); stopErr != nil {
			err = errors.Join(err, fmt.Errorf("stopping the local control plane: %w", stopErr))
		}
	}()

	kubeconfig, err := writeAdminKubeconfig(env, opts.Kubeconfig)
	if err != nil {
		return err
	}
	serve := opts.Serve
	// Its own API server's certificate, whatever --webhook-client-ca says: no other
	// caller's is presented here.
	serve.WebhookClientCA, serve.WebhookClientNames = webhookClient.CAFile, []string{webhookclient.Name}
	// The sample charts are served on loopback, and so are a developer's own.
	serve.AllowChartNetworks = append(slices.Clone(serve.AllowChartNetworks), chartfetch.LoopbackNetworks()...)
	webhook, err := stableWebhookAddr(opts.DataDir, serve.WebhookAddr)
	if err != nil {
		return fmt.Errorf("--webhook-bind-address: %w", err)
	}
	if webhook.Taken != "" {
		fmt.Fprintf(out, "The webhook address %s that this data directory remembers is in use by another program: using %s instead, remembered from now on. Conversion webhooks of CRDs generated before still point at %s until Compositor rewrites them.\n",
			webhook.Taken, webhook.Addr, webhook.Taken)
	}
	serve.WebhookAddr = webhook.Addr
	// The API server runs on this machine, so it reaches the webhooks by address.
	serve.WebhookURL = "https://" + serve.WebhookAddr
	if err := createNamespace(ctx, cfg, serve.Namespace); err != nil {
		return err
	}
	var chartsURL string
	if opts.ChartRepositoryAddr != "" {
		url, stop, err := serveSampleCharts(opts.ChartRepositoryAddr)
		if err != nil {
			return err
		}
		defer stop()
		chartsURL = url
		fmt.Fprintf(out, "The sample charts are served at %s\n", url)
	}
	// The ready text comes once the webhooks judge every write: a script that waits
	// for it may write at once, and nothing it writes is stored unjudged.
	var welcome sync.Once
	return runServe(ctx, rest.CopyConfig(cfg), &serve, func() {
		welcome.Do(func() { printWelcome(out, kubeconfig, chartsURL) })
	})
}

// serveSampleCharts serves the sample charts built into the binary as a Helm repository
// until stop is called.
func serveSampleCharts(addr string) (url string, stop func(), err error) {
	repository, err := samples.NewRepository()
	if err != nil {
		return "", nil, fmt.Errorf("packaging the sample charts: %w", err)
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, fmt.Errorf("serving the sample charts on %s (change it with --chart-repository-addr): %w", addr, err)
	}
	srv := &http.Server{Handler: repository, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(l) }() // returns when stop closes the server
	return "http://" + reachableAddr(l.Addr()), func() { _ = srv.Close() }, nil
}

// reachableAddr is where a client on this machine reaches a listener bound to addr: the
// port chosen for port 0, and loopback for an unspecified IP ("0.0.0.0", "[::]"),
// which is no address to connect to nor one a chart URL may name.
func reachableAddr(addr net.Addr) string {
	tcp, ok := addr.(*net.TCPAddr)
	if !ok || !tcp.IP.IsUnspecified() {
		return addr.String()
	}
	loopback := net.IPv4(127, 0, 0, 1)
	if tcp.IP.To4() == nil {
		loopback = net.IPv6loopback
	}
	return net.JoinHostPort(loopback.String(), strconv.Itoa(tcp.Port))
}

// createNamespace creates Compositor's namespace, which holds its CA Secret.
func createNamespace(ctx context.Context, cfg *rest.Config, name string) error {
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		return err
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := c.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating namespace %s: %w", name, err)
	}
	return nil
}

// writeAdminKubeconfig provisions a cluster-admin user and writes its kubeconfig to
// path, returning the absolute path.
func writeAdminKubeconfig(env *envtest.Environment, path string) (string, error) {
	user, err := env.AddUser(envtest.User{Name: "compositor-dev-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return "", fmt.Errorf("provisioning the admin user: %w", err)
	}
	data, err := user.KubeConfig()
	if err != nil {
		return "", fmt.Errorf("building the admin kubeconfig: %w", err)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(filepath.Dir(abs), 0o700); err != nil {
		return "", fmt.Errorf("writing kubeconfig: %w", err)
	}
	if err := os.WriteFile(abs, data, 0o600); err != nil {
		return "", fmt.Errorf("writing kubeconfig: %w", err)
	}
	return abs, nil
}

// printWelcome says how to use the control plane; chartsURL is where the sample
// charts are served (serveSampleCharts), "" when --chart-repository-addr turned that
// off: the walk-through then has no repository to name.
func printWelcome(out io.Writer, kubeconfig, chartsURL string) {
	fmt.Fprintf(out, `Compositor is running on a local control plane. In another shell:

export KUBECONFIG=%s

kubectl get crd
kubectl explain compositiondefinition.spec.chart
kubectl get compositiondefinitions -A -o wide
`, kubeconfig)
	if chartsURL == "" {
		fmt.Fprint(out, `
The sample chart repository is off (--chart-repository-addr ""): give it an address
for a walk-through with the sample chart.

Press Ctrl-C to stop; nothing keeps running.
`)
		return
	}
	fmt.Fprintf(out, `
A walk-through with the sample chart repository (--chart-repository-addr):

kubectl create namespace fireworksapp-system
echo 'apiVersion: core.krateo.io/v1alpha1
kind: CompositionDefinition
metadata: {name: fireworksapp-1-1-5, namespace: fireworksapp-system}
spec: {chart: {repo: fireworks-app, url: %s, version: 1.1.5}}' | kubectl apply -f -
kubectl wait compositiondefinition fireworksapp-1-1-5 -n fireworksapp-system --for condition=Ready=True
echo 'apiVersion: composition.krateo.io/v1-1-5
kind: FireworksApp
metadata: {name: demo, namespace: fireworksapp-system}
spec: {replicaCount: 1}' | kubectl apply -f -
kubectl wait fireworksapp demo -n fireworksapp-system --for condition=Ready=True
bin/k8s/helm list -n fireworksapp-system

Press Ctrl-C to stop; nothing keeps running.
`, chartsURL)
}
