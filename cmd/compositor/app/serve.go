package app

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlconfig "sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/compositor-dev/compositor/api"
	corev1alpha1 "github.com/compositor-dev/compositor/api/core/v1alpha1"
	policyv1alpha1 "github.com/compositor-dev/compositor/api/policy/v1alpha1"
	"github.com/compositor-dev/compositor/api/vocab"
	"github.com/compositor-dev/compositor/certs"
	"github.com/compositor-dev/compositor/chartfetch"
	"github.com/compositor-dev/compositor/chartstore"
	"github.com/compositor-dev/compositor/generators/controller"
	"github.com/compositor-dev/compositor/generators/crd"
	"github.com/compositor-dev/compositor/multicluster"
	"github.com/compositor-dev/compositor/ownership"
	"github.com/compositor-dev/compositor/policies"
	"github.com/compositor-dev/compositor/policies/membudget"
	"github.com/compositor-dev/compositor/reconciler/audit"
	compositionctl "github.com/compositor-dev/compositor/reconciler/composition"
	"github.com/compositor-dev/compositor/reconciler/constraints"
	"github.com/compositor-dev/compositor/reconciler/definition"
	"github.com/compositor-dev/compositor/reconciler/kinds"
	"github.com/compositor-dev/compositor/reconciler/policy"
	"github.com/compositor-dev/compositor/webhooks"
)

// leaderElectionID names the lease that replicas of Compositor compete for.
const leaderElectionID = "compositor.compositor.dev"

func newServeCommand() *cobra.Command {
	opts := NewServeOptions()
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the webhooks and the CompositionDefinition reconciler",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := opts.complete(cmd.Flags()); err != nil {
				return err
			}
			cfg, err := ctrl.GetConfig()
			if err != nil {
				return fmt.Errorf("loading kubeconfig: %w", err)
			}
			return RunServe(cmd.Context(), cfg, opts)
		},
	}
	opts.AddFlags(cmd.Flags())
	return cmd
}

// RunServe starts the manager against cfg and blocks until ctx is done.
func RunServe(ctx context.Context, cfg *rest.Config, opts *ServeOptions) error {
	return runServe(ctx, cfg, opts, nil)
}

// runServe is RunServe that calls ready, when it is not nil, once the webhook
// configurations are installed and the API server sends writes to the webhooks
// (webhooksJudge): from then on no write to Compositor's groups is stored unjudged.
// `compositor dev` prints its ready text then.
func runServe(ctx context.Context, cfg *rest.Config, opts *ServeOptions, ready func()) error {
	ctrl.SetLogger(zap.New(zap.UseDevMode(opts.Debug)))

	scheme, err := api.NewScheme()
	if err != nil {
		return err
	}
	// Reads that must not be cached (Secrets: Compositor never caches them cluster-wide)
	// and writes before the manager's cache runs go through a direct client.
	live, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return fmt.Errorf("creating a client: %w", err)
	}
	provider, err := newCertProvider(live, opts)
	if err != nil {
		return err
	}
	mgr, err := newManager(cfg, scheme, provider, opts)
	if err != nil {
		return err
	}
	fetcher, err := chartfetch.New(chartfetch.Options{
		CacheDir: opts.ChartCacheDir, RegistryConfigPath: opts.RegistryConfigPath, AllowNetworks: opts.AllowChartNetworks,
	})
	if err != nil {
		return err
	}
	// Charts once fetched are kept in the cluster: no replica needs their source again.
	charts := &chartstore.Source{Fetcher: fetcher, Live: live, Store: &chartstore.Store{Client: live, Namespace: opts.Namespace, Owner: opts.ServiceAccount}}

	// Admission, the audit and the installs render within --max-rendered-bytes, in
	// sandbox workers unless admission is unbounded.
	renderer := &policies.Renderer{MaxRenderedBytes: opts.Limits.MaxRenderedBytes}
	if !opts.UnboundedAdmission {
		if renderer, err = setupSandbox(opts.Limits.MaxRenderedBytes); err != nil {
			return err
		}
	}
	// The seal migration is planned before the master key is made: whether the key
	// existed says whether the installation's records were ever sealed.
	migration := &compositionctl.SealMigration{Client: live, Namespace: opts.Namespace}
	if err := migration.Plan(ctx, controller.ReleaseSealSecret); err != nil {
		return err
	}
	sealKey, err := releaseSealKey(ctx, live, opts.Namespace)
	if err != nil {
		return err
	}
	master, err := compositionctl.NewMasterSeal(sealKey)
	if err != nil {
		return err
	}
	migration.Master = master
	// The leader seals the records under their definitions' keys before any
	// controller acts on them; the controllers get no key until it is done.
	if err := mgr.Add(migration); err != nil {
		return err
	}
	// Each definition's key proves the CompositionRevisions a rollback restores.
	judge, err := setupAdmission(ctx, mgr, charts, live, live, compositionctl.DefinitionRevisions{Keys: master}, renderer, opts)
	if err != nil {
		return err
	}
	endpoint, err := setupWebhookConfigurations(ctx, mgr, live, provider, opts, ready)
	if err != nil {
		return err
	}
	if err := setupReconciler(mgr, live, charts, judge, provider, endpoint, sealKey, master.GateOn(migration.Done), opts); err != nil {
		return err
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("webhooks", mgr.GetWebhookServer().StartedChecker()); err != nil {
		return err
	}
	return mgr.Start(ctx)
}

// cachedByObject is how the manager's cache holds some kinds: Secrets without their
// annotations (secretCache), and only the RoleBindings Compositor manages, which the
// release binder watches and the definition reconciler deletes.
func cachedByObject() map[client.Object]cache.ByObject {
	byObject := secretCache()
	byObject[&rbacv1.RoleBinding{}] = cache.ByObject{Label: labels.SelectorFromSet(labels.Set{vocab.LabelManagedBy: vocab.ManagedBy})}
	return byObject
}

// newManager creates Compositor's manager, its webhook server serving the certificate
// of provider.
func newManager(cfg *rest.Config, scheme *runtime.Scheme, provider certs.Provider, opts *ServeOptions) (manager.Manager, error) {
	host, port, err := splitHostPort(opts.WebhookAddr)
	if err != nil {
		return nil, fmt.Errorf("--webhook-bind-address: %w", err)
	}
	clientAuth, err := webhookClientAuth(opts)
	if err != nil {
		return nil, err
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                  scheme,
		Cache:                   cache.Options{SyncPeriod: &opts.Sync, ByObject: cachedByObject()},
		Metrics:                 metricsserver.Options{BindAddress: opts.MetricsAddr},
		HealthProbeBindAddress:  opts.HealthProbeAddr,
		PprofBindAddress:        opts.PprofAddr,
		LeaderElection:          opts.LeaderElection,
		LeaderElectionID:        leaderElectionID,
		LeaderElectionNamespace: cmp.Or(opts.LeaderElectionNamespace, opts.Namespace),
		// Stepping down at once on shutdown lets the next replica take over without
		// waiting for the lease to expire.
		LeaderElectionReleaseOnCancel: true,
		// Controller names are unique within one manager; RunServe may start more than
		// one manager in a process over its life (the e2e tests do), and the global
		// check would refuse the second.
		Controller: ctrlconfig.Controller{SkipNameValidation: ptr.To(true)},
		// With --webhook-client-ca, only the API server is heard on the admission paths.
		WebhookServer: clientAuth.Server(webhook.NewServer(webhook.Options{
			Host: host,
			Port: port,
			TLSOpts: []func(*tls.Config){func(c *tls.Config) {
				c.MinVersion = tls.VersionTLS12
				// HTTP/1.1 only: a caller holds one request per connection, so what the
				// webhooks bound per request (the held refusals of unauthenticated
				// callers, the lanes) is not multiplied by HTTP/2's streams.
				c.NextProtos = []string{"http/1.1"}
				c.GetCertificate = provider.GetCertificate
				if clientAuth != nil {
					clientAuth.ConfigureTLS(c)
				}
			}},
		})),
	})
	if err != nil {
		return nil, fmt.Errorf("creating manager: %w", err)
	}
	return mgr, nil
}

// webhookClientAuth authenticates the webhooks' callers by --webhook-client-ca; nil
// without it.
func webhookClientAuth(opts *ServeOptions) (*webhooks.ClientAuth, error) {
	if opts.WebhookClientCA == "" {
		return nil, nil
	}
	auth, err := webhooks.NewClientAuth(opts.WebhookClientCA, opts.WebhookClientNames)
	if err != nil {
		return nil, fmt.Errorf("--webhook-client-ca: %w", err)
	}
	return auth, nil
}

// setupAdmission mounts the admission handlers and keeps the policies they enforce
// current: CompositionPolicy objects, --policy-dir files, and the audit of what exists.
func setupAdmission(ctx context.Context, mgr manager.Manager, charts *chartstore.Source, live client.Client, authorizer webhooks.Authorizer, revisions webhooks.RevisionVerifier, renderer *policies.Renderer, opts *ServeOptions) (*policies.Judge, error) {
	policies.SetMaxRangeElements(opts.PolicyMaxRange)
	budget, err := opts.policyMemoryBudget()
	if err != nil {
		return nil, err
	}
	membudget.SetBudget(budget)
	engine, err := policies.NewEngine(ctx, policies.Options{Timeout: opts.PolicyTimeout, FailOpen: opts.PolicyFailOpen, DisabledBuiltins: opts.DisabledPolicies, EnabledBuiltins: opts.EnabledPolicies})
	if err != nil {
		return nil, err
	}
	judge := policies.NewJudge(policies.JudgeOptions{Engine: engine, Renderer: renderer})
	// Admission and the audit render with the cluster's .Capabilities, as the install
	// does.
	dc, err := discovery.NewDiscoveryClientForConfig(mgr.GetConfig())
	if err != nil {
		return nil, fmt.Errorf("creating a discovery client for the charts' .Capabilities: %w", err)
	}
	capabilities := policies.NewClusterCapabilities(memory.NewMemCacheClient(dc))
	capabilities.Warm()
	// Admission finds a composition's definition through this index of the cache.
	if err := ownership.IndexServed(ctx, mgr.GetFieldIndexer()); err != nil {
		return nil, err
	}
	// The release-name check watches the metadata of each kind written, on every replica.
	metadataClient, err := metadata.NewForConfigAndClient(mgr.GetConfig(), mgr.GetHTTPClient())
	if err != nil {
		return nil, err
	}
	releaseNames := webhooks.NewReleaseNames(metadataClient, mgr.GetCache())
	if err := mgr.Add(releaseNames); err != nil {
		return nil, err
	}
	// Only Compositor writes the status of compositions: as itself, or as the
	// generated controllers' ServiceAccounts, which the webhook knows from the
	// definitions.
	users, err := compositorUsers(ctx, mgr.GetConfig())
	if err != nil {
		return nil, err
	}
	webhooks.Register(mgr.GetWebhookServer(), webhooks.Options{
		ReleaseNames: releaseNames,
		Cached:       mgr.GetClient(),
		Live:         mgr.GetAPIReader(),
		Judge:        judge,
		Charts:       charts,
		Capabilities: capabilities,
		// Creates SubjectAccessReviews, never cached.
		Authorizer:      authorizer,
		Users:           users,
		Limits:          opts.Limits,
		LaneConcurrency: opts.LaneConcurrency,
		Unbounded:       opts.UnboundedAdmission,
		Revisions:       revisions,
		Namespace:       opts.Namespace,
	})
	if err := (&policy.Reconciler{Client: mgr.GetClient(), Engine: engine}).SetupWithManager(mgr); err != nil {
		return nil, err
	}
	if err := setupConstraints(ctx, mgr, live, engine, opts.Namespace, charts.Store.OwnerReference); err != nil {
		return nil, err
	}
	if opts.AuditInterval > 0 {
		// Leader only: one replica writes the audit status.
		// The audit remembers its renders: a composition judged again because its
		// status, its namespace's labels or the policies changed renders as before.
		auditJudge := policies.NewJudge(policies.JudgeOptions{Engine: engine, Renderer: renderer.Remembering(policies.DefaultRenderMemoBytes)})
		auditor := &audit.Auditor{Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Judge: auditJudge, Charts: charts, Interval: opts.AuditInterval, Capabilities: capabilities}
		if err := mgr.Add(auditor); err != nil {
			return nil, err
		}
	}
	if opts.PolicyDir != "" {
		if err := watchPolicyDir(mgr, engine, opts.PolicyDir); err != nil {
			return nil, err
		}
	}
	// The webhooks read definitions, and the metadata of Secrets (Helm's release
	// records), from the cache: start their informers with the manager rather than on
	// the first admission request, on every replica, leader or not.
	if _, err := mgr.GetCache().GetInformer(ctx, &corev1alpha1.CompositionDefinition{}); err != nil {
		return nil, err
	}
	secrets := &metav1.PartialObjectMetadata{}
	secrets.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
	_, err = mgr.GetCache().GetInformer(ctx, secrets)
	return judge, err
}

// setupWebhookConfigurations prepares the webhook certificate and, once the webhook
// server answers, installs the webhook configurations on every replica, then calls
// ready (when not nil) once the API server sends writes to them. It returns where the
// API server reaches the webhooks.
func setupWebhookConfigurations(ctx context.Context, mgr manager.Manager, live client.Client, provider certs.Provider, opts *ServeOptions, ready func()) (webhooks.Endpoint, error) {
	if err := provider.Ensure(ctx); err != nil {
		return webhooks.Endpoint{}, fmt.Errorf("preparing the webhook certificate: %w", err)
	}
	endpoint, err := webhookEndpoint(opts)
	if err != nil {
		return webhooks.Endpoint{}, err
	}
	configOpts := webhooks.ConfigurationOptions{Endpoint: endpoint, TimeoutSeconds: int32(opts.WebhookTimeout / time.Second)}
	if opts.Certs == CertsCertManager {
		configOpts.Annotations = certs.InjectCAFrom(opts.Namespace, opts.CertManagerCertificate)
	}
	started := mgr.GetWebhookServer().StartedChecker()
	for _, runnable := range []manager.Runnable{provider, everyReplica(func(ctx context.Context) error {
		return installWebhooks(ctx, started, live, provider, configOpts, ready)
	})} {
		if err := mgr.Add(runnable); err != nil {
			return webhooks.Endpoint{}, err
		}
	}
	return endpoint, nil
}

// setupReconciler registers the CompositionDefinition reconciler with mgr and keeps the
// conversion webhook and CA bundle of every generated CRD current.
func setupReconciler(mgr manager.Manager, live client.Client, charts *chartstore.Source, judge *policies.Judge, provider certs.Provider, endpoint webhooks.Endpoint, sealKey []byte, seal *compositionctl.MasterSeal, opts *ServeOptions) (err error) {
	conversion := crd.ConversionWebhook{URL: endpoint.URL}
	if endpoint.Service != nil {
		conversion.Service = &apiextensionsv1.ServiceReference{Namespace: endpoint.Service.Namespace, Name: endpoint.Service.Name, Port: endpoint.Service.Port}
	} else {
		conversion.URL += crd.ConvertPath
	}
	definitions := &definition.Reconciler{
		Client:             mgr.GetClient(),
		Live:               mgr.GetAPIReader(),
		Charts:             charts,
		Conversion:         conversion,
		Bundle:             provider,
		Recorder:           mgr.GetEventRecorder("compositor"),
		Poll:               opts.Poll,
		MaxReconcileRate:   opts.MaxReconcileRate,
		Mapper:             mgr.GetRESTMapper(),
		ControllerImage:    opts.ControllerImage,
		AllowChartNetworks: opts.AllowChartNetworks,
		Judge:              judge,
		MasterKey:          sealKey,
		Seal:               seal,
	}
	// One runtime for every generated kind: the release bindings of each served version
	// and, in-process, its composition controller.
	kinds := &kinds.Runtime{
		Config:           mgr.GetConfig(),
		InProcess:        opts.Controllers == ControllersInProcess,
		Charts:           charts,
		Judge:            judge,
		MaxReconcileRate: opts.MaxReconcileRate,
		Sync:             opts.Sync,
		Seal:             seal,

		NamespaceConcurrency: opts.ControllerNamespaceConcurrency,
	}
	if opts.Multicluster {
		if kinds.Targets, err = setupTargets(mgr, kinds, opts); err != nil {
			return err
		}
	}
	if err := kinds.SetupWithManager(mgr); err != nil {
		return err
	}
	definitions.Kinds = kinds
	if err := definitions.SetupWithManager(mgr); err != nil {
		return err
	}
	// The conversion webhook of every generated CRD follows the endpoint and the CA
	// bundle without waiting for a chart: a definition whose chart source is down
	// keeps a readable API across restarts and rotations.
	keeper := &definition.ConversionKeeper{Client: mgr.GetClient(), Conversion: conversion, Bundle: provider}
	if err := keeper.SetupWithManager(mgr); err != nil {
		return err
	}
	return mgr.Add(everyReplica(func(ctx context.Context) error {
		provider.Subscribe(func(bundle []byte) {
			keeper.BundleChanged()
			if err := injectIntoGeneratedCRDs(ctx, live, bundle); err != nil {
				log.FromContext(ctx).Error(err, "Updating the CA bundle of generated CRDs")
			}
		})
		<-ctx.Done()
		return nil
	}))
}

// setupTargets engages the target clusters registered in Compositor's namespace and
// has every placed composition reconciled when they change. One replica runs alone
// and engages them all; replicas that elect a leader share them (--replica-id), each
// engaging and installing on its own, on every replica, leader or not.
func setupTargets(mgr manager.Manager, kinds *kinds.Runtime, opts *ServeOptions) (*compositionctl.Targets, error) {
	log := mgr.GetLogger().WithName("multicluster")
	clusterOpts := multicluster.Options{
		Namespace: opts.Namespace,
		Log:       log,
		Notify:    func(string) { kinds.ClustersChanged() },
	}
	if opts.LeaderElection {
		clusterOpts.Shard = &multicluster.ShardOptions{ID: opts.ReplicaID, LeaseDuration: opts.ShardLeaseDuration}
	}
	clusters, err := multicluster.New(mgr.GetConfig(), clusterOpts)
	if err != nil {
		return nil, err
	}
	var run manager.Runnable = manager.RunnableFunc(clusters.Start)
	if opts.LeaderElection {
		run = everyReplica(clusters.Start)
	}
	if err := mgr.Add(run); err != nil {
		return nil, err
	}
	return &compositionctl.Targets{Clusters: clusters, Log: log, Sharded: opts.LeaderElection}, nil
}

// watchPolicyDir loads the policies of dir now, so that a broken directory stops the
// start, and reloads them whenever its files change.
func watchPolicyDir(mgr manager.Manager, engine *policies.Engine, dir string) error {
	if err := policies.ReloadDir(context.Background(), engine, dir); err != nil {
		return fmt.Errorf("--policy-dir %s: %w", dir, err)
	}
	return mgr.Add(everyReplica(func(ctx context.Context) error {
		err := policies.WatchDir(ctx, engine, dir, func(err error) {
			if err != nil {
				log.FromContext(ctx).Error(err, "Reloading the policy directory; the last good policies stay in force", "dir", dir)
			}
		})
		if ctx.Err() != nil {
			return nil // stopped
		}
		return err
	}))
}

// injectIntoGeneratedCRDs writes bundle into the conversion config of every CRD that
// Compositor generated.
func injectIntoGeneratedCRDs(ctx context.Context, c client.Client, bundle []byte) error {
	list := &apiextensionsv1.CustomResourceDefinitionList{}
	if err := c.List(ctx, list, client.MatchingLabels{vocab.LabelManaged: "true"}); err != nil {
		return err
	}
	objs := make([]client.Object, 0, len(list.Items))
	for i := range list.Items {
		objs = append(objs, &list.Items[i])
	}
	if len(objs) == 0 {
		return nil
	}
	return certs.InjectCABundle(ctx, c, bundle, objs...)
}

func newCertProvider(c client.Client, opts *ServeOptions) (certs.Provider, error) {
	if opts.Certs == CertsCertManager {
		return certs.NewCertManager(certs.CertManagerOptions{Dir: opts.CertDir})
	}
	builtin := certs.BuiltinOptions{Namespace: opts.Namespace}
	if opts.WebhookURL != "" {
		u, err := url.Parse(opts.WebhookURL)
		if err != nil {
			return nil, fmt.Errorf("--webhook-url: %w", err)
		}
		if ip := net.ParseIP(u.Hostname()); ip != nil {
			builtin.IPAddresses = []net.IP{ip}
		} else {
			builtin.DNSNames = []string{u.Hostname()}
		}
	} else {
		builtin.DNSNames = certs.ServiceDNSNames(opts.WebhookService, opts.Namespace)
	}
	return certs.NewBuiltin(c, builtin)
}

func webhookEndpoint(opts *ServeOptions) (webhooks.Endpoint, error) {
	if opts.WebhookURL != "" {
		return webhooks.Endpoint{URL: opts.WebhookURL}, nil
	}
	if opts.WebhookService == "" {
		return webhooks.Endpoint{}, fmt.Errorf("set --webhook-service or --webhook-url: the API server must reach the webhooks")
	}
	return webhooks.Endpoint{Service: &admissionregistrationv1.ServiceReference{
		Namespace: opts.Namespace,
		Name:      opts.WebhookService,
		Port:      ptr.To[int32](443),
	}}, nil
}

// installWebhooks waits until the webhook server answers, so that no write is sent to
// a server that is not there, then installs the webhook configurations and keeps their
// CA bundle current. With ready set, it then waits until the API server sends writes
// to the webhooks and calls ready.
func installWebhooks(ctx context.Context, started healthz.Checker, c client.Client, bundle webhooks.BundleSource, opts webhooks.ConfigurationOptions, ready func()) error {
	err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(context.Context) (bool, error) {
		return started(nil) == nil, nil
	})
	if err != nil {
		return nil // stopped before the server came up
	}
	if err := webhooks.Install(ctx, c, bundle, opts); err != nil {
		return err
	}
	log.FromContext(ctx).Info("Webhook configurations installed", "name", webhooks.ConfigurationName)
	if ready != nil {
		if err := waitUntilJudged(ctx, c, opts); err != nil {
			if ctx.Err() != nil {
				return nil // stopped before the API server called the webhooks
			}
			return err
		}
		ready()
	}
	<-ctx.Done()
	return nil
}

// probeTimeout bounds one probe of the webhooks through the API server.
const probeTimeout = 10 * time.Second

// waitUntilJudged probes the webhooks through the API server until they judge the
// probe (webhooksJudge), logging why not every 10 seconds. It fails when ctx ends, or
// when the configurations name no webhook to probe.
func waitUntilJudged(ctx context.Context, c client.Client, opts webhooks.ConfigurationOptions) error {
	_, validating, err := webhooks.Configurations(opts)
	if err != nil {
		return err
	}
	// The webhook that judges CompositionPolicies.
	webhookName := ""
	for _, w := range validating.Webhooks {
		for _, rule := range w.Rules {
			if slices.Contains(rule.APIGroups, policyv1alpha1.GroupVersion.Group) && slices.Contains(rule.Resources, "*") {
				webhookName = w.Name
			}
		}
	}
	if webhookName == "" {
		return errors.New("no validating webhook judges CompositionPolicies")
	}
	logger := log.FromContext(ctx)
	lastLog := time.Now()
	return wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		probeCtx, cancel := context.WithTimeout(ctx, probeTimeout)
		defer cancel()
		err := webhooksJudge(probeCtx, c, webhookName)
		if err == nil {
			logger.Info("The API server sends writes to the webhooks", "name", webhooks.ConfigurationName)
			return true, nil
		}
		if time.Since(lastLog) > 10*time.Second {
			logger.Info("Waiting for the API server to send writes to the webhooks", "probe", err.Error())
			lastLog = time.Now()
		}
		return false, nil
	})
}

// webhooksJudge tells whether the API server sends writes of Compositor's groups to
// its validating webhook, named webhookName: a dry-run create of a CompositionPolicy
// whose Rego does not compile, which the CRD's schema admits and the webhook alone
// refuses, must come back refused by that webhook. Admitted, the configuration is not
// in force yet; refused by the API server because the webhook cannot be reached, it is
// in force but the webhook does not answer. The dry run stores nothing, and the
// webhook has no side effects.
func webhooksJudge(ctx context.Context, c client.Client, webhookName string) error {
	probe := &policyv1alpha1.CompositionPolicy{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "compositor-readiness-probe-"},
		Spec:       policyv1alpha1.CompositionPolicySpec{Rego: "package compositor.readiness_probe\n\nthis is not Rego {"},
	}
	err := c.Create(ctx, probe, client.DryRunAll)
	switch {
	case err == nil:
		return errors.New("a write the validating webhook refuses was admitted: its configuration is not in force yet")
	case strings.Contains(err.Error(), fmt.Sprintf("admission webhook %q denied the request", webhookName)):
		return nil
	default:
		return err
	}
}

// everyReplica is a runnable that runs on every replica, leader or not.
type everyReplica func(ctx context.Context) error

func (f everyReplica) Start(ctx context.Context) error { return f(ctx) }
func (everyReplica) NeedLeaderElection() bool          { return false }

func splitHostPort(addr string) (string, int, error) {
	host, portText, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.Atoi(portText)
	if err != nil || port < 1 || port > 65535 {
		return "", 0, fmt.Errorf("port %q is not a number between 1 and 65535", portText)
	}
	return host, port, nil
}

// releaseSealKey returns the key that seals Helm release records, kept in Secret
// compositor-release-seal of namespace: made on the first start, shared by every
// replica and every start after.
func releaseSealKey(ctx context.Context, live client.Client, namespace string) ([]byte, error) {
	for range 3 {
		secret := &corev1.Secret{}
		err := live.Get(ctx, client.ObjectKey{Namespace: namespace, Name: controller.ReleaseSealSecret}, secret)
		if err == nil {
			key, err := compositionctl.SealKeyFrom(secret)
			if err != nil {
				return nil, fmt.Errorf("the release seal: %w", err)
			}
			return key, nil
		}
		if !apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("reading the release seal Secret %s/%s: %w", namespace, controller.ReleaseSealSecret, err)
		}
		err = live.Create(ctx, compositionctl.SealSecret(namespace, controller.ReleaseSealSecret, compositionctl.NewSealKey()))
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("creating the release seal Secret %s/%s: %w", namespace, controller.ReleaseSealSecret, err)
		}
	}
	return nil, fmt.Errorf("the release seal Secret %s/%s keeps changing", namespace, controller.ReleaseSealSecret)
}

// setupConstraints enforces Gatekeeper's ConstraintTemplates and Constraints: it
// serves the ConstraintTemplate API when Gatekeeper does not, and keeps the engine's
// constraints current on every replica. A replica is not ready before it has read them.
// What is in force is written to a ConfigMap of namespace for the generated
// controllers' install gates.
func setupConstraints(ctx context.Context, mgr manager.Manager, live client.Client, engine *policies.Engine, namespace string, owner func(context.Context) *metav1.OwnerReference) error {
	if err := constraints.EnsureTemplateCRD(ctx, live); err != nil {
		// Without the API no template can exist, so there is nothing to enforce: the
		// controller waits for it to be served.
		log.FromContext(ctx).Error(err, "The ConstraintTemplate API is not served, and Compositor cannot serve it")
	}
	dyn, err := dynamic.NewForConfigAndClient(mgr.GetConfig(), mgr.GetHTTPClient())
	if err != nil {
		return err
	}
	// Nothing is judged or installed without them: writes of compositions are refused
	// and controllers wait until they are read.
	engine.ExpectConstraints(policies.OriginObject)
	ctl := &constraints.Controller{Dynamic: dyn, Client: live, Engine: engine, Recorder: mgr.GetEventRecorder("compositor"), MirrorNamespace: namespace, MirrorOwner: owner}
	if err := mgr.Add(ctl); err != nil {
		return err
	}
	return mgr.AddReadyzCheck("constraints", func(_ *http.Request) error { return ctl.Ready(nil) })
}
