// Command controller is cert-manager's controller for tests: the controllers of
// github.com/cert-manager/cert-manager (the root module, whose cmd/controller module is
// not fetchable through the Go proxy) wired the way cert-manager's own binary wires
// them, limited to the self-signed and CA issuers and without leader election, metrics
// or a healthz server. It runs out of cluster against --kubeconfig.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"
	"k8s.io/klog/v2"

	"github.com/cert-manager/cert-manager/pkg/controller"
	logf "github.com/cert-manager/cert-manager/pkg/logs"

	// Controllers register themselves with controller.Known; issuers with the issuer
	// factory the issuers and certificaterequests controllers use.
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/approver"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/ca"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/selfsigned"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/issuing"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/keymanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/readiness"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/requestmanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/revisionmanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/trigger"
	_ "github.com/cert-manager/cert-manager/pkg/controller/clusterissuers"
	_ "github.com/cert-manager/cert-manager/pkg/controller/issuers"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/ca"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/selfsigned"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "cert-manager controller:", err)
		os.Exit(1)
	}
}

func run() error {
	fs := flag.NewFlagSet("controller", flag.ExitOnError)
	klog.InitFlags(fs)
	var (
		kubeconfig  = fs.String("kubeconfig", "", "kubeconfig of the API server (empty: in-cluster)")
		master      = fs.String("master", "", "API server address, overriding the kubeconfig's")
		namespace   = fs.String("namespace", "", "only watch this namespace (empty: all)")
		clusterNS   = fs.String("cluster-resource-namespace", "kube-system", "namespace of the Secrets that ClusterIssuers refer to")
		leaderElect = fs.Bool("leader-elect", false, "not supported: must be false (one instance per cluster)")
		controllers = fs.String("controllers", "*", "comma-separated controllers to run; * runs every built-in one: "+strings.Join(known(), ","))
		workers     = fs.Int("concurrent-workers", 5, "workers per controller")
		qps         = fs.Float64("kube-api-qps", 20, "client QPS when API Priority and Fairness is off")
		burst       = fs.Int("kube-api-burst", 50, "client burst when API Priority and Fairness is off")
		ownerRef    = fs.Bool("enable-certificate-owner-ref", false, "make Certificates owners of their Secrets")
	)
	if err := fs.Parse(os.Args[1:]); err != nil {
		return err
	}
	if *leaderElect {
		return errors.New("--leader-elect=true is not supported by this build")
	}
	enabled := known()
	if *controllers != "*" {
		enabled = strings.Split(*controllers, ",")
		for _, n := range enabled {
			if !slices.Contains(known(), n) {
				return fmt.Errorf("unknown controller %q (known: %s)", n, strings.Join(known(), ","))
			}
		}
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx = logf.NewContext(ctx, klog.Background().WithName("cert-manager-controller"))
	log := logf.FromContext(ctx)

	factory, err := controller.NewContextFactory(ctx, controller.ContextOptions{
		APIServerHost:      *master,
		Kubeconfig:         *kubeconfig,
		KubernetesAPIQPS:   float32(*qps),
		KubernetesAPIBurst: *burst,
		Namespace:          *namespace,
		IssuerOptions: controller.IssuerOptions{
			ClusterResourceNamespace: *clusterNS,
		},
		CertificateOptions: controller.CertificateOptions{
			EnableOwnerRef:                           *ownerRef,
			CertificateRequestMinimumBackoffDuration: time.Hour,
			CertificateRequestMaximumBackoffDuration: 32 * time.Hour,
		},
	})
	if err != nil {
		return err
	}
	cmctx, err := factory.Build()
	if err != nil {
		return err
	}

	g, gctx := errgroup.WithContext(ctx)
	for _, n := range enabled {
		c, err := controller.Known()[n](factory)
		if err != nil {
			stop()
			_ = g.Wait()
			return fmt.Errorf("controller %s: %w", n, err)
		}
		log.Info("starting controller", "controller", n)
		g.Go(func() error { return c.Run(*workers, gctx) })
	}
	cmctx.SharedInformerFactory.Start(gctx.Done())
	cmctx.KubeSharedInformerFactory.Start(gctx.Done())
	cmctx.HTTP01ResourceMetadataInformersFactory.Start(gctx.Done())
	err = g.Wait()
	cmctx.HTTP01ResourceMetadataInformersFactory.Shutdown()
	cmctx.KubeSharedInformerFactory.Shutdown()
	cmctx.SharedInformerFactory.Shutdown()
	if err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// known lists the registered controllers, sorted.
func known() []string {
	var ns []string
	for n := range controller.Known() {
		ns = append(ns, n)
	}
	slices.Sort(ns)
	return ns
}
