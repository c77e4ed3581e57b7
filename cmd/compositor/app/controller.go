package app

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/compositor-dev/compositor/api"
	"github.com/compositor-dev/compositor/chartfetch"
	"github.com/compositor-dev/compositor/chartstore"
	"github.com/compositor-dev/compositor/generators/rbac"
	"github.com/compositor-dev/compositor/policies"
	"github.com/compositor-dev/compositor/policies/membudget"
	compositionctl "github.com/compositor-dev/compositor/reconciler/composition"
	"github.com/compositor-dev/compositor/reconciler/constraints"
	"github.com/compositor-dev/compositor/reconciler/policy"
)

// serviceAccountNamespaceFile names the namespace a pod runs in.
const serviceAccountNamespaceFile = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// ControllerOptions configure `compositor controller`: the composition controller of
// one served version of a generated API.
type ControllerOptions struct {
	// Group, Version and Resource name the served version, e.g. composition.krateo.io,
	// v1-1-5, fireworksapps.
	Group    string
	Version  string
	Resource string
	// Namespace is the namespace of the definition whose compositions the controller
	// owns; empty means the namespace the pod runs in.
	Namespace string

	Debug              bool
	Sync               time.Duration
	MaxReconcileRate   int
	HealthProbeAddr    string
	MetricsAddr        string
	ChartCacheDir      string
	RegistryConfigPath string
	// AllowChartNetworks are the ranges refused by default where chart sources may be
	// reached nonetheless, as for serve.
	AllowChartNetworks []netip.Prefix
	// ChartArchiveNamespace is Compositor's namespace, where the definitions' reconciler
	// keeps verified chart archives in Secrets: the controller reads its chart there,
	// never writing, before going to the chart source. Empty: no archive is read.
	ChartArchiveNamespace string
	// ReleaseSealNamespace is Compositor's namespace, where each definition's key,
	// which seals the release records of its compositions, is kept in a Secret
	// (reconciler/composition KeySecretName). The controller reads the keys of its
	// definitions with the get on those Secrets the generated RBAC grants, never the
	// master key they are derived from.
	ReleaseSealNamespace string
}

// NewControllerOptions returns the defaults of `compositor controller`.
func NewControllerOptions() *ControllerOptions {
	return &ControllerOptions{
		Sync:             time.Hour,
		MaxReconcileRate: 3,
		HealthProbeAddr:  ":8081",
		MetricsAddr:      ":8080",
		ChartCacheDir:    defaultChartCacheDir(),
	}
}

// AddFlags registers the controller flags on fs.
func (o *ControllerOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Group, "group", o.Group, "Group of the generated API")
	fs.StringVar(&o.Version, "version", o.Version, "Served version whose compositions this controller owns")
	fs.StringVar(&o.Resource, "resource", o.Resource, "Resource (plural) of the generated API")
	fs.StringVar(&o.Namespace, "namespace", o.Namespace, "Namespace of the owning CompositionDefinition (env POD_NAMESPACE; default: the pod's namespace)")
	fs.BoolVarP(&o.Debug, "debug", "d", o.Debug, "Development logging (env CORE_PROVIDER_DEBUG)")
	fs.DurationVarP(&o.Sync, "sync", "s", o.Sync, "Resync period of every composition (env CORE_PROVIDER_SYNC)")
	fs.IntVar(&o.MaxReconcileRate, "max-reconcile-rate", o.MaxReconcileRate, "Most reconciliations per second (env CORE_PROVIDER_MAX_RECONCILE_RATE)")
	fs.StringVar(&o.HealthProbeAddr, "health-probe-bind-address", o.HealthProbeAddr, `Address of /healthz and /readyz ("0" turns them off)`)
	fs.StringVar(&o.MetricsAddr, "metrics-bind-address", o.MetricsAddr, `Address of /metrics ("0" turns metrics off)`)
	fs.StringVar(&o.ChartCacheDir, "chart-cache-dir", o.ChartCacheDir, "Directory of downloaded chart archives, keyed by digest")
	fs.StringVar(&o.RegistryConfigPath, "helm-registry-config-path", o.RegistryConfigPath, "Helm registry config file with OCI credentials (env HELM_REGISTRY_CONFIG_PATH)")
	fs.StringVar(&o.ReleaseSealNamespace, "release-seal-namespace", o.ReleaseSealNamespace, "Compositor's namespace, whose Secrets keep the keys of the definitions this controller serves, which seal their Helm release records: read, never written (env COMPOSITOR_RELEASE_SEAL_NAMESPACE)")
	fs.StringVar(&o.ChartArchiveNamespace, "chart-archive-namespace", o.ChartArchiveNamespace, "Compositor's namespace, where chart archives are kept in the cluster: read (never written) before the chart source (env COMPOSITOR_CHART_ARCHIVE_NAMESPACE)")
	addAllowChartNetworkFlag(fs, &o.AllowChartNetworks)
}

// Validate reports every option that is missing or out of range.
func (o *ControllerOptions) Validate() error {
	var errs []error
	for flag, value := range map[string]string{"--group": o.Group, "--version": o.Version, "--resource": o.Resource} {
		if value == "" {
			errs = append(errs, fmt.Errorf("%s is required", flag))
		}
	}
	if o.Sync <= 0 {
		errs = append(errs, fmt.Errorf("--sync must be positive, got %s", o.Sync))
	}
	if o.MaxReconcileRate < 1 {
		errs = append(errs, fmt.Errorf("--max-reconcile-rate must be at least 1, got %d", o.MaxReconcileRate))
	}
	if o.ReleaseSealNamespace == "" {
		errs = append(errs, errors.New("--release-seal-namespace is required: the controller acts on no Helm release record it cannot prove its own"))
	}
	return errors.Join(errs...)
}

func newControllerCommand() *cobra.Command {
	opts := NewControllerOptions()
	cmd := &cobra.Command{
		Use:   "controller --group GROUP --version VERSION --resource RESOURCE",
		Short: "Run the composition controller of one served version: one Helm release per composition",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := applyEnv(cmd.Flags(), os.LookupEnv); err != nil {
				return err
			}
			if err := opts.Validate(); err != nil {
				return err
			}
			cfg, err := ctrl.GetConfig()
			if err != nil {
				return fmt.Errorf("loading kubeconfig: %w", err)
			}
			return RunController(cmd.Context(), cfg, opts)
		},
	}
	opts.AddFlags(cmd.Flags())
	return cmd
}

// RunController runs the controller of one served version against cfg until ctx is
// done.
func RunController(ctx context.Context, cfg *rest.Config, opts *ControllerOptions) error {
	ctrl.SetLogger(zap.New(zap.UseDevMode(opts.Debug)))
	scheme, err := api.NewScheme()
	if err != nil {
		return err
	}
	gvk, err := kindOf(cfg, schema.GroupVersionResource{Group: opts.Group, Version: opts.Version, Resource: opts.Resource})
	if err != nil {
		return err
	}
	live, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return fmt.Errorf("creating a client: %w", err)
	}
	// The values and a render are checked in worker processes before Helm renders:
	// a composition whose render runs away costs its deadline, then nothing.
	renderer, err := setupSandbox(0)
	if err != nil {
		return err
	}
	fetcher, err := chartfetch.New(chartfetch.Options{
		CacheDir: opts.ChartCacheDir, RegistryConfigPath: opts.RegistryConfigPath, AllowNetworks: opts.AllowChartNetworks,
	})
	if err != nil {
		return err
	}
	source := &chartstore.Source{Fetcher: fetcher, Live: live}
	if opts.ChartArchiveNamespace != "" {
		// Read-only: keeping archives is the definition reconciler's job, and the
		// generated RBAC grants get on this version's archive alone.
		source.Store = &chartstore.Store{Client: live, Namespace: opts.ChartArchiveNamespace, ReadOnly: true}
	}
	namespace := opts.Namespace
	if namespace == "" {
		if data, err := os.ReadFile(serviceAccountNamespaceFile); err == nil {
			namespace = strings.TrimSpace(string(data))
		}
	}
	// Each composition's records are sealed with its definition's key, read from
	// that definition's Secret when first needed (a Secret written later, by serve,
	// is read then).
	keys := &compositionctl.SecretKeys{Reader: live, Namespace: opts.ReleaseSealNamespace}
	// What it installs is judged with the CompositionPolicies, as admission judges
	// what is written: loaded before the first install, then kept in step.
	// The install gate evaluates the constraints' Rego here too.
	membudget.SetBudget(membudget.Default())
	engine, err := policies.NewEngine(ctx, policies.Options{})
	if err != nil {
		return err
	}
	if err := policy.Load(ctx, live, engine); err != nil {
		return fmt.Errorf("reading the CompositionPolicies, which judge what this controller installs: %w", err)
	}
	// And the Gatekeeper constraints serve enforces, which it writes for controllers in
	// its namespace.
	var constraintsFollower *constraints.Follower
	if opts.ReleaseSealNamespace != "" {
		clientset, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return err
		}
		constraintsFollower = &constraints.Follower{Clientset: clientset, Namespace: opts.ReleaseSealNamespace, Engine: engine}
		if err := constraintsFollower.Load(ctx); err != nil {
			return err
		}
	}
	build := func(namespaces []string) (manager.Manager, error) {
		mgr, err := compositionctl.NewManager(cfg, compositionctl.ManagerOptions{
			GVK:                 gvk,
			Scheme:              scheme,
			Charts:              source,
			Judge:               policies.NewJudge(policies.JudgeOptions{Engine: engine, Renderer: renderer}),
			DefinitionNamespace: namespace,
			MaxReconcileRate:    opts.MaxReconcileRate,
			Sync:                opts.Sync,
			Keys:                keys,
			HealthProbeAddr:     opts.HealthProbeAddr,
			MetricsAddr:         opts.MetricsAddr,
			Namespaces:          namespaces,
		})
		if err != nil {
			return nil, err
		}
		if err := (&policy.Reconciler{Client: mgr.GetClient(), Engine: engine, ReadOnly: true}).SetupWithManager(mgr); err != nil {
			return nil, err
		}
		if constraintsFollower != nil {
			if err := mgr.Add(constraintsFollower); err != nil {
				return nil, err
			}
		}
		return mgr, nil
	}
	// Its compositions are watched only where its release role is bound, which is
	// where it may list and watch them: the manager is made again when that changes.
	clientset, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	at := types.NamespacedName{Namespace: opts.ReleaseSealNamespace, Name: rbac.NamesFor(namespace, opts.Resource, opts.Version).BoundNamespaces}
	return runScoped(ctrl.LoggerInto(ctx, ctrl.Log), newBoundNamespaces(clientset, at), build)
}

// kindOf finds the kind of a served resource through discovery.
func kindOf(cfg *rest.Config, gvr schema.GroupVersionResource) (schema.GroupVersionKind, error) {
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return schema.GroupVersionKind{}, err
	}
	mapper, err := apiutil.NewDynamicRESTMapper(cfg, httpClient)
	if err != nil {
		return schema.GroupVersionKind{}, err
	}
	gvk, err := mapper.KindFor(gvr)
	if err != nil {
		return schema.GroupVersionKind{}, fmt.Errorf("finding the kind of %s: %w", gvr, err)
	}
	return gvk, nil
}
