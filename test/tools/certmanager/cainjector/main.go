// Command cainjector is cert-manager's CA injector for tests: the injectors of
// github.com/cert-manager/cert-manager's pkg/controller/cainjector in a
// controller-runtime manager, as cert-manager's own binary sets them up, without
// leader election or metrics. It runs out of cluster against --kubeconfig and fills
// the caBundle of webhook configurations, APIServices and CRDs annotated
// cert-manager.io/inject-ca-from.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	cmscheme "github.com/cert-manager/cert-manager/pkg/client/clientset/versioned/scheme"
	"github.com/cert-manager/cert-manager/pkg/controller/cainjector"
	logf "github.com/cert-manager/cert-manager/pkg/logs"
	corev1 "k8s.io/api/core/v1"
	apiext "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	kscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	apireg "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "cert-manager cainjector:", err)
		os.Exit(1)
	}
}

func run() error {
	fs := flag.NewFlagSet("cainjector", flag.ExitOnError)
	klog.InitFlags(fs)
	var (
		kubeconfig  = fs.String("kubeconfig", "", "kubeconfig of the API server (empty: in-cluster)")
		master      = fs.String("master", "", "API server address, overriding the kubeconfig's")
		namespace   = fs.String("namespace", "", "only watch this namespace (empty: all)")
		leaderElect = fs.Bool("leader-elect", false, "not supported: must be false (one instance per cluster)")
		ignoreNS    = fs.String("ignore-namespaces", "", "comma-separated namespaces whose Secrets are never read")
		fromCerts   = fs.Bool("enable-certificates-data-source", true, "read CAs from Certificates (cert-manager.io/inject-ca-from)")
		webhooks    = fs.Bool("enable-webhook-injectables", true, "inject into Validating- and MutatingWebhookConfigurations")
		apiServices = fs.Bool("enable-apiservices-injectable", true, "inject into APIServices")
		crds        = fs.Bool("enable-customresourcedefinitions-injectable", true, "inject into CRDs' conversion webhooks")
	)
	if err := fs.Parse(os.Args[1:]); err != nil {
		return err
	}
	if *leaderElect {
		return errors.New("--leader-elect=true is not supported by this build")
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	logger := klog.Background().WithName("cert-manager-cainjector")
	ctx = logf.NewContext(ctx, logger)
	ctrl.SetLogger(logger)

	cfg, err := clientcmd.BuildConfigFromFlags(*master, *kubeconfig)
	if err != nil {
		return err
	}
	cfg.UserAgent = "cert-manager-cainjector"

	scheme := runtime.NewScheme()
	utilruntime.Must(kscheme.AddToScheme(scheme))
	utilruntime.Must(cmscheme.AddToScheme(scheme))
	utilruntime.Must(apiext.AddToScheme(scheme))
	utilruntime.Must(apireg.AddToScheme(scheme))

	var namespaces map[string]cache.Config
	if *namespace != "" {
		namespaces = map[string]cache.Config{*namespace: {}}
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme,
		Cache:                  cache.Options{ReaderFailOnMissingInformer: true, DefaultNamespaces: namespaces},
		Client:                 client.Options{Cache: &client.CacheOptions{DisableFor: []client.Object{&corev1.Secret{}}}},
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
	})
	if err != nil {
		return fmt.Errorf("creating the manager: %w", err)
	}

	if *fromCerts {
		// The Certificates data source watches Certificates: wait for their CRD, with a
		// deadline, as cert-manager's cainjector does.
		direct, err := client.New(cfg, client.Options{Scheme: scheme})
		if err != nil {
			return err
		}
		err = wait.PollUntilContextTimeout(ctx, time.Second, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
			err := direct.Get(ctx, types.NamespacedName{Name: "certificates.cert-manager.io"}, &apiext.CustomResourceDefinition{})
			if apierrors.IsNotFound(err) {
				logger.Info("waiting for the certificates.cert-manager.io CRD")
				return false, nil
			}
			return err == nil, err
		})
		if err != nil {
			return fmt.Errorf("waiting for the certificates.cert-manager.io CRD: %w", err)
		}
	}

	var ignore []string
	if *ignoreNS != "" {
		ignore = strings.Split(*ignoreNS, ",")
	}
	if err := cainjector.RegisterAllInjectors(ctx, mgr, cainjector.SetupOptions{
		Namespace:                    *namespace,
		IgnoreNamespaces:             ignore,
		EnableCertificatesDataSource: *fromCerts,
		EnabledReconcilersFor: map[string]bool{
			cainjector.MutatingWebhookConfigurationName:   *webhooks,
			cainjector.ValidatingWebhookConfigurationName: *webhooks,
			cainjector.APIServiceName:                     *apiServices,
			cainjector.CustomResourceDefinitionName:       *crds,
		},
	}); err != nil {
		return fmt.Errorf("registering the injectors: %w", err)
	}
	return mgr.Start(ctx)
}
