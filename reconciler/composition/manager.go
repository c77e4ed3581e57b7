package composition

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlconfig "sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/compositor-dev/compositor/api/vocab"
	"github.com/compositor-dev/compositor/chartstore"
	"github.com/compositor-dev/compositor/internal/fairshare"
	"github.com/compositor-dev/compositor/ownership"
	"github.com/compositor-dev/compositor/policies"
)

// ManagerOptions configure the manager of one version's composition controller.
type ManagerOptions struct {
	// GVK is the served version's group, version and kind.
	GVK schema.GroupVersionKind
	// Scheme knows Compositor's own types.
	Scheme *runtime.Scheme
	// Charts loads the definitions' charts.
	Charts *chartstore.Source
	// DefinitionNamespace, Bind and MaxReconcileRate: see Reconciler.
	DefinitionNamespace string
	Bind                func(ctx context.Context, namespace string) error
	MaxReconcileRate    int
	// Judge validates values and judges manifests before they are installed (see
	// Reconciler.Judge); nil checks the chart's schemas and no policies.
	Judge *policies.Judge
	// Sync is the resync period.
	Sync time.Duration
	// Keys give each composition's definition's key, which seals the release records
	// the controller writes and proves those it reads (sealkeys.go).
	Keys SealKeys
	// HealthProbeAddr and MetricsAddr: "0" turns them off.
	HealthProbeAddr string
	MetricsAddr     string
	// Namespaces, when set, are the only namespaces whose compositions the controller
	// watches: those where its release role is bound, which lets it list and watch
	// them there. An empty, non-nil list runs no composition controller at all (the
	// manager serves its probes and whatever else is added to it). nil watches every
	// namespace.
	Namespaces []string
}

// managerWorkers is how many compositions one version's controller Deployment
// reconciles at once; one namespace's take at most a quarter of them (Reconciler.Lanes).
const managerWorkers = 8

// NewManager returns a manager, acting as the user of cfg, that runs the composition
// controller of one served version. Its cache holds only the compositions labelled
// with that version.
func NewManager(cfg *rest.Config, opts ManagerOptions) (manager.Manager, error) {
	r := &Reconciler{
		GVK:                 opts.GVK,
		Charts:              opts.Charts,
		DefinitionNamespace: opts.DefinitionNamespace,
		Bind:                opts.Bind,
		MaxReconcileRate:    opts.MaxReconcileRate,
		Judge:               opts.Judge,
		Lanes:               fairshare.New(managerWorkers / 4),
	}
	if r.Judge == nil {
		r.Judge = policies.NewJudge(policies.JudgeOptions{})
	}
	sync := opts.Sync
	if sync <= 0 {
		sync = time.Hour
	}
	healthAddr, metricsAddr := opts.HealthProbeAddr, opts.MetricsAddr
	if healthAddr == "" {
		healthAddr = "0"
	}
	if metricsAddr == "" {
		metricsAddr = "0"
	}
	var namespaces map[string]cache.Config
	for _, ns := range opts.Namespaces {
		if namespaces == nil {
			namespaces = map[string]cache.Config{}
		}
		namespaces[ns] = cache.Config{}
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme: opts.Scheme,
		Cache: cache.Options{
			SyncPeriod: &sync,
			ByObject: map[client.Object]cache.ByObject{
				r.NewComposition(): {Label: labels.SelectorFromSet(labels.Set{vocab.LabelCompositionVersion: opts.GVK.Version}), Namespaces: namespaces},
			},
		},
		Client:                 client.Options{Cache: &client.CacheOptions{Unstructured: true}},
		Metrics:                metricsserver.Options{BindAddress: metricsAddr},
		HealthProbeBindAddress: healthAddr,
		Controller:             ctrlconfig.Controller{SkipNameValidation: ptrTo(true)},
	})
	if err != nil {
		return nil, fmt.Errorf("creating the manager of %s: %w", opts.GVK, err)
	}
	if err := ownership.IndexServed(context.Background(), mgr.GetFieldIndexer()); err != nil {
		return nil, err
	}
	helm, err := NewHelm(cfg, nil, mgr.GetLogger().WithName("helm"))
	if err != nil {
		return nil, err
	}
	r.Client, r.Live, r.Helm, r.Keys = mgr.GetClient(), mgr.GetAPIReader(), helm, opts.Keys
	r.Recorder = mgr.GetEventRecorder(r.GVK.Kind + "-" + r.GVK.Version + "-controller")
	if opts.Namespaces == nil || len(opts.Namespaces) > 0 {
		if err := r.SetupWithManager(mgr); err != nil {
			return nil, err
		}
	}
	if healthAddr != "0" {
		if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
			return nil, err
		}
		if err := mgr.AddReadyzCheck("ping", healthz.Ping); err != nil {
			return nil, err
		}
	}
	return mgr, nil
}
