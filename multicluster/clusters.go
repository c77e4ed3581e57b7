package multicluster

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/compositor-dev/compositor/api/vocab"
	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	mcmanager "sigs.k8s.io/multicluster-runtime/pkg/manager"
	"sigs.k8s.io/multicluster-runtime/pkg/manager/coordinator/sharded"
	"sigs.k8s.io/multicluster-runtime/pkg/manager/coordinator/sharded/peers"
	mc "sigs.k8s.io/multicluster-runtime/pkg/multicluster"
	"sigs.k8s.io/multicluster-runtime/pkg/util/sanitize"
	"sigs.k8s.io/multicluster-runtime/providers/kubeconfig"
)

const (
	// SecretLabel marks a Secret in Compositor's namespace as a target cluster's
	// kubeconfig; its value must be "true". It is multicluster-runtime's label.
	SecretLabel = kubeconfig.DefaultKubeconfigSecretLabel
	// SecretKey is the data key of the kubeconfig in such a Secret.
	SecretKey = kubeconfig.DefaultKubeconfigSecretKey
)

// Options configure Clusters.
type Options struct {
	// Namespace is Compositor's namespace, where the kubeconfig Secrets are. Required.
	Namespace string
	// Log receives the manager's and the provider's messages; the zero value discards
	// them.
	Log logr.Logger
	// Notify, when set, is called with a cluster's name after it is engaged, after it
	// is disengaged and when its kubeconfig Secret changes, outside any lock. It must
	// not block for long.
	Notify func(name string)
	// Shard, when set, shares the clusters among the replicas that run Clusters with
	// the same Namespace: multicluster-runtime's sharded coordinator, with a Lease per
	// replica and one per cluster in Namespace, engages each cluster on one replica
	// only, and moves a replica's clusters to the others when its Lease lapses. ID
	// names this replica (the pod's name); it must be unique among them.
	Shard *ShardOptions
}

// ShardOptions configure the sharing of clusters among replicas.
type ShardOptions struct {
	ID string
	// LeaseDuration is how long a replica's Leases last unrenewed; 0 is
	// multicluster-runtime's default (20 s).
	LeaseDuration time.Duration
}

// Clusters are the target clusters engaged from kubeconfig Secrets. Start runs them.
type Clusters struct {
	namespace string
	notify    func(string)
	mgr       mcmanager.Manager
	secrets   client.Reader
	// replica is this replica's ID as its peer Lease names it, and leases reads the
	// peer Leases, uncached; both only with Options.Shard.
	replica string
	leases  client.Reader

	mu      sync.RWMutex
	engaged map[string]*engagement
}

// engagement is one engaged cluster, until its context ends.
type engagement struct {
	name    string
	cluster cluster.Cluster
	client  client.Client
	done    <-chan struct{}
}

// ended reports whether the engagement is over: its entry in Clusters goes a moment
// later, and another replica may hold the cluster already.
func (e *engagement) ended() bool {
	select {
	case <-e.done:
		return true
	default:
		return false
	}
}

// Cluster is an engaged target cluster, as it was when List, Get or Select returned it.
type Cluster struct {
	// Name is the name of the cluster's kubeconfig Secret.
	Name string
	// Labels are the Secret's labels.
	Labels map[string]string

	e *engagement
}

// Config returns a copy of the REST config built from the cluster's kubeconfig.
func (c Cluster) Config() *rest.Config { return rest.CopyConfig(c.e.cluster.GetConfig()) }

// Client returns an uncached client for the cluster: reading through it opens no watch.
func (c Cluster) Client() client.Client { return c.e.client }

// Done is closed when this engagement ends: the Secret was deleted or unlabelled, its
// kubeconfig changed (the cluster is engaged again, with a new Done), another replica
// holds the cluster now (Options.Shard), or Clusters stopped. The zero Cluster's is
// nil.
func (c Cluster) Done() <-chan struct{} {
	if c.e == nil {
		return nil
	}
	return c.e.done
}

// Ended reports whether this engagement has ended (Done); false for the zero Cluster.
func (c Cluster) Ended() bool { return c.e != nil && c.e.ended() }

// New returns the clusters engaged from the kubeconfig Secrets in opts.Namespace of the
// cluster cfg reaches. It asks that API server's discovery about Secrets; nothing is
// watched until Start.
func New(cfg *rest.Config, opts Options) (*Clusters, error) {
	if opts.Namespace == "" {
		return nil, errors.New("multicluster: the namespace of the kubeconfig Secrets is required")
	}
	log := opts.Log
	if log.GetSink() == nil {
		log = logr.Discard()
	}
	provider := kubeconfig.New(kubeconfig.Options{
		Namespace:             opts.Namespace,
		KubeconfigSecretLabel: SecretLabel,
		KubeconfigSecretKey:   SecretKey,
		RESTOptions:           []func(*rest.Config) error{CheckKubeconfig},
		ClusterOptions: []cluster.Option{func(o *cluster.Options) {
			o.Logger = log.WithName("cluster")
		}},
	})
	labelled := labels.SelectorFromSet(labels.Set{SecretLabel: "true"})
	var mcOpts []mcmanager.Option
	var replica string
	var leases client.Reader
	if opts.Shard != nil {
		coordinator, kube, err := shardedCoordinator(cfg, opts.Namespace, *opts.Shard, log)
		if err != nil {
			return nil, err
		}
		mcOpts = append(mcOpts, mcmanager.WithCoordinator(coordinator))
		replica, leases = sanitize.DNS1123(opts.Shard.ID), kube
	}
	mgr, err := mcmanager.New(cfg, provider, manager.Options{
		Logger:                 log,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		LeaderElection:         false,
		Controller:             config.Controller{SkipNameValidation: ptr.To(true)},
		Cache: cache.Options{
			DefaultNamespaces: map[string]cache.Config{opts.Namespace: {}},
			ByObject:          map[client.Object]cache.ByObject{&corev1.Secret{}: {Label: labelled, Transform: screenKubeconfig}},
		},
	}, mcOpts...)
	if err != nil {
		return nil, fmt.Errorf("multicluster: creating the manager: %w", err)
	}
	if err := provider.SetupWithManager(context.Background(), mgr); err != nil {
		return nil, fmt.Errorf("multicluster: setting up the kubeconfig provider: %w", err)
	}
	c := &Clusters{
		namespace: opts.Namespace,
		notify:    opts.Notify,
		mgr:       mgr,
		secrets:   mgr.GetLocalManager().GetClient(),
		engaged:   map[string]*engagement{},
		replica:   replica,
		leases:    leases,
	}
	if err := mgr.Add(tracker{c}); err != nil {
		return nil, fmt.Errorf("multicluster: adding the engagement tracker: %w", err)
	}
	return c, nil
}

// shardedCoordinator is multicluster-runtime's sharded coordinator with its Leases in
// namespace: compositor-peer-<id> per replica, compositor-shard-<cluster> per cluster.
func shardedCoordinator(cfg *rest.Config, namespace string, opts ShardOptions, log logr.Logger) (*sharded.Coordinator, client.Client, error) {
	if opts.ID == "" {
		return nil, nil, errors.New("multicluster: sharding needs the replica's ID")
	}
	kube, err := client.New(cfg, client.Options{})
	if err != nil {
		return nil, nil, fmt.Errorf("multicluster: creating the coordinator's client: %w", err)
	}
	log = log.WithName("shards")
	options := []sharded.Option{
		sharded.WithShardLease(namespace, "compositor-shard"),
		sharded.WithPerClusterLease(true),
		sharded.WithPeerRegistry(peers.NewLeaseRegistry(kube, namespace, peerLeasePrefix, opts.ID, 1, log)),
	}
	if d := opts.LeaseDuration; d > 0 {
		options = append(options, sharded.WithLeaseTimings(d, d/2, 750*time.Millisecond), sharded.WithSynchronizationIntervals(d/4, d/2))
	}
	return sharded.New(kube, log, options...), kube, nil
}

// peerLeasePrefix names the Lease each replica renews while it runs:
// <peerLeasePrefix>-<replica>.
const peerLeasePrefix = "compositor-peer"

// Replica is this replica's ID among those sharing the clusters (Options.Shard), as
// its peer Lease names it; "" when the clusters are not shared.
func (c *Clusters) Replica() string { return c.replica }

// ReplicaAlive reports whether the replica with ID id still renews its peer Lease:
// false when it lapsed, or when there is none (or it cannot be read, or the
// clusters are not shared).
func (c *Clusters) ReplicaAlive(ctx context.Context, id string) bool {
	if c.leases == nil || id == "" {
		return false
	}
	lease := &coordinationv1.Lease{}
	if err := c.leases.Get(ctx, client.ObjectKey{Namespace: c.namespace, Name: peerLeasePrefix + "-" + sanitize.DNS1123(id)}, lease); err != nil {
		return false
	}
	spec := lease.Spec
	if spec.RenewTime == nil || spec.LeaseDurationSeconds == nil {
		return false
	}
	return time.Since(spec.RenewTime.Time) < time.Duration(*spec.LeaseDurationSeconds)*time.Second
}

// Start runs the manager and the provider until ctx ends; it returns then, or on an
// error starting them. It is called once: a stopped Clusters does not start again.
func (c *Clusters) Start(ctx context.Context) error {
	return c.mgr.Start(ctx)
}

// A kubeconfig may not have Compositor run a program (an exec credential plugin, an
// auth-provider) or use a file of its own (a token, certificate or key file:
// Compositor's ServiceAccount token, say, sent to whatever server the kubeconfig
// names). It carries its credentials inline: a token, or a client certificate and key.
//
// clientcmd reads the files a kubeconfig names as it parses it, so the kubeconfig is
// screened before anything parses it: as the Secret enters the cache (the provider
// reads it from there), a refused kubeconfig is replaced by refusedKubeconfig, which
// CheckKubeconfig refuses, and the reason is kept in the cached copy's annotation
// refusedAnnotation. A cluster so refused is registered and never engaged; one engaged
// before is disengaged.
const (
	refusedServer = "https://kubeconfig-refused.compositor.invalid"
)

var refusedKubeconfig = []byte(`apiVersion: v1
kind: Config
clusters: [{name: refused, cluster: {server: "` + refusedServer + `"}}]
contexts: [{name: refused, context: {cluster: refused, user: refused}}]
current-context: refused
users: [{name: refused, user: {}}]
`)

// CheckRawKubeconfig refuses a kubeconfig that names a program or a file, in any of its
// users or clusters, without reading any file. The error names the entries, not the
// paths or commands: it reaches the status of compositions.
func CheckRawKubeconfig(data []byte) error {
	cfg, err := clientcmd.Load(data)
	if err != nil {
		return fmt.Errorf("key %q is not a kubeconfig: %w", SecretKey, err)
	}
	var refused []string
	for name, user := range cfg.AuthInfos {
		if user.Exec != nil {
			refused = append(refused, fmt.Sprintf("user %s runs an exec credential plugin", name))
		}
		if user.AuthProvider != nil {
			refused = append(refused, fmt.Sprintf("user %s runs an auth-provider", name))
		}
		if user.TokenFile != "" || user.ClientCertificate != "" || user.ClientKey != "" {
			refused = append(refused, fmt.Sprintf("user %s reads its credentials from files", name))
		}
	}
	for name, cluster := range cfg.Clusters {
		if cluster.CertificateAuthority != "" {
			refused = append(refused, fmt.Sprintf("cluster %s reads its certificate authority from a file", name))
		}
	}
	if len(refused) == 0 {
		return nil
	}
	slices.Sort(refused)
	return fmt.Errorf("the kubeconfig is refused: %s; Compositor never runs a program or reads a file a kubeconfig names: put the credentials in the kubeconfig itself (token, client-certificate-data and client-key-data, certificate-authority-data)", strings.Join(refused, ", "))
}

// screenKubeconfig is the cache's transform of kubeconfig Secrets (see
// refusedAnnotation).
func screenKubeconfig(obj any) (any, error) {
	secret, ok := obj.(*corev1.Secret)
	if !ok {
		return obj, nil
	}
	data, ok := secret.Data[SecretKey]
	if !ok {
		return obj, nil
	}
	if err := CheckRawKubeconfig(data); err != nil {
		secret.Data[SecretKey] = refusedKubeconfig
		if secret.Annotations == nil {
			secret.Annotations = map[string]string{}
		}
		secret.Annotations[vocab.AnnotationKubeconfigRefused] = err.Error()
	}
	return secret, nil
}

// CheckKubeconfig is the kubeconfig provider's REST option, the last check before a
// cluster is built from a kubeconfig: it refuses what screenKubeconfig refused, and
// what CheckRawKubeconfig refuses, in the parsed form.
func CheckKubeconfig(cfg *rest.Config) error {
	if cfg.Host == refusedServer {
		return errors.New("the kubeconfig is refused: see the Secret's " + vocab.AnnotationKubeconfigRefused + " in Compositor's log and its compositions' status")
	}
	var refused []string
	if cfg.ExecProvider != nil {
		refused = append(refused, "an exec credential plugin")
	}
	if cfg.AuthProvider != nil {
		refused = append(refused, "an auth-provider")
	}
	if cfg.BearerTokenFile != "" || cfg.CertFile != "" || cfg.KeyFile != "" || cfg.CAFile != "" {
		refused = append(refused, "files")
	}
	if len(refused) == 0 {
		return nil
	}
	return fmt.Errorf("the kubeconfig is refused: it would have Compositor use %s", strings.Join(refused, ", "))
}

// Unusable says why the kubeconfig Secret of cluster name cannot engage it, or "" when
// nothing is known to be wrong with it.
func (c *Clusters) Unusable(ctx context.Context, name string) string {
	secret := &corev1.Secret{}
	if err := c.secrets.Get(ctx, client.ObjectKey{Namespace: c.namespace, Name: name}, secret); err != nil {
		return ""
	}
	if reason, refused := secret.Annotations[vocab.AnnotationKubeconfigRefused]; refused {
		return fmt.Sprintf("Secret %s/%s: %s", c.namespace, name, reason)
	}
	if _, err := OpenTo(secret.Annotations, nil); err != nil {
		return fmt.Sprintf("Secret %s/%s: %v", c.namespace, name, err)
	}
	data, ok := secret.Data[SecretKey]
	if !ok {
		return fmt.Sprintf("Secret %s/%s has no key %q", c.namespace, name, SecretKey)
	}
	// Screened already (screenKubeconfig): parsing it reads no file.
	cfg, err := clientcmd.RESTConfigFromKubeConfig(data)
	if err != nil {
		return fmt.Sprintf("Secret %s/%s: key %q is not a usable kubeconfig: %v", c.namespace, name, SecretKey, err)
	}
	if err := CheckKubeconfig(cfg); err != nil {
		return fmt.Sprintf("Secret %s/%s: %v", c.namespace, name, err)
	}
	return ""
}

// Namespace is where the kubeconfig Secrets are.
func (c *Clusters) Namespace() string { return c.namespace }

// List returns the engaged clusters, by name.
func (c *Clusters) List(ctx context.Context) []Cluster {
	c.mu.RLock()
	es := slices.Collect(maps.Values(c.engaged))
	c.mu.RUnlock()
	slices.SortFunc(es, func(a, b *engagement) int { return cmp.Compare(a.name, b.name) })
	out := make([]Cluster, 0, len(es))
	for _, e := range es {
		if e.ended() {
			continue
		}
		if cl, ok := c.withLabels(ctx, e); ok {
			out = append(out, cl)
		}
	}
	return out
}

// Get returns the engaged cluster name.
func (c *Clusters) Get(ctx context.Context, name string) (Cluster, bool) {
	c.mu.RLock()
	e, ok := c.engaged[name]
	c.mu.RUnlock()
	if !ok || e.ended() {
		return Cluster{}, false
	}
	return c.withLabels(ctx, e)
}

// Selection is what a placement selects among the registered clusters, each by name.
type Selection struct {
	// Engaged are the clusters open to the namespace, engaged.
	Engaged []Cluster
	// Waiting are the clusters open to the namespace that are registered but not
	// engaged (yet: a kubeconfig just written or rotated is engaged within moments;
	// one that cannot be used never is), and those whose Secret's
	// NamespaceSelectorAnnotation is not a selector.
	Waiting []string
	// Closed are the clusters the selector matches whose Secret does not open them to
	// the namespace (NamespaceSelectorAnnotation).
	Closed []string
}

// Select returns the registered clusters whose labels selector matches, split as
// Selection says, for a composition in a namespace with namespaceLabels. A nil
// selector matches none.
func (c *Clusters) Select(ctx context.Context, selector labels.Selector, namespaceLabels map[string]string) Selection {
	var out Selection
	if selector == nil {
		return out
	}
	secrets := &corev1.SecretList{}
	if err := c.secrets.List(ctx, secrets, client.InNamespace(c.namespace), client.MatchingLabels{SecretLabel: "true"}); err != nil {
		c.mgr.GetLogger().Error(err, "listing the kubeconfig Secrets")
		return out
	}
	slices.SortFunc(secrets.Items, func(a, b corev1.Secret) int { return cmp.Compare(a.Name, b.Name) })
	c.mu.RLock()
	defer c.mu.RUnlock()
	for _, secret := range secrets.Items {
		if !selector.Matches(labels.Set(secret.Labels)) {
			continue
		}
		open, err := OpenTo(secret.Annotations, namespaceLabels)
		switch {
		case err != nil:
			// A typo must not read as "closed", which would uninstall every release
			// there: the cluster waits until its Secret is fixed (Unusable says why).
			out.Waiting = append(out.Waiting, secret.Name)
			continue
		case !open:
			out.Closed = append(out.Closed, secret.Name)
			continue
		}
		if e, ok := c.engaged[secret.Name]; ok && !e.ended() {
			out.Engaged = append(out.Engaged, Cluster{Name: secret.Name, Labels: maps.Clone(secret.Labels), e: e})
		} else {
			out.Waiting = append(out.Waiting, secret.Name)
		}
	}
	return out
}

// Registered reports whether a kubeconfig Secret registers cluster name, engaged or not.
func (c *Clusters) Registered(ctx context.Context, name string) bool {
	secret := &corev1.Secret{}
	if err := c.secrets.Get(ctx, client.ObjectKey{Namespace: c.namespace, Name: name}, secret); err != nil {
		if !apierrors.IsNotFound(err) {
			c.mgr.GetLogger().Error(err, "reading a cluster's kubeconfig Secret", "cluster", name)
			return true // unknown: not a reason to give the cluster up
		}
		return false
	}
	return secret.Labels[SecretLabel] == "true"
}

// withLabels reads the labels of e's Secret from the cache; a Secret the cache no
// longer has is a cluster about to be disengaged, and is left out.
func (c *Clusters) withLabels(ctx context.Context, e *engagement) (Cluster, bool) {
	secret := &corev1.Secret{}
	if err := c.secrets.Get(ctx, client.ObjectKey{Namespace: c.namespace, Name: e.name}, secret); err != nil {
		if !apierrors.IsNotFound(err) {
			c.mgr.GetLogger().Error(err, "reading a cluster's kubeconfig Secret", "cluster", e.name)
		}
		return Cluster{}, false
	}
	return Cluster{Name: e.name, Labels: maps.Clone(secret.Labels), e: e}, true
}

// tracker is told by the manager of every engagement, and sees it end.
type tracker struct{ c *Clusters }

var _ mcmanager.Runnable = tracker{}

// Start tells Notify of every change to a kubeconfig Secret as well: a change of
// labels moves a cluster in or out of placements without engaging it again.
func (t tracker) Start(ctx context.Context) error {
	if t.c.notify != nil {
		informer, err := t.c.mgr.GetLocalManager().GetCache().GetInformer(ctx, &corev1.Secret{})
		if err != nil {
			return fmt.Errorf("watching the kubeconfig Secrets: %w", err)
		}
		notify := func(obj any) {
			if o, ok := obj.(client.Object); ok {
				t.c.notify(o.GetName())
			} else if tombstone, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
				_, name, _ := toolscache.SplitMetaNamespaceKey(tombstone.Key)
				t.c.notify(name)
			}
		}
		registration, err := informer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
			AddFunc:    notify,
			UpdateFunc: func(_, obj any) { notify(obj) },
			DeleteFunc: notify,
		})
		if err != nil {
			return fmt.Errorf("watching the kubeconfig Secrets: %w", err)
		}
		defer func() { _ = informer.RemoveEventHandler(registration) }()
	}
	<-ctx.Done()
	return nil
}

func (t tracker) Engage(ctx context.Context, name mc.ClusterName, cl cluster.Cluster) error {
	direct, err := client.New(cl.GetConfig(), client.Options{Scheme: cl.GetScheme(), Mapper: cl.GetRESTMapper()})
	if err != nil {
		return fmt.Errorf("creating a client for cluster %s: %w", name, err)
	}
	e := &engagement{name: string(name), cluster: cl, client: direct, done: ctx.Done()}
	c := t.c
	c.mu.Lock()
	c.engaged[e.name] = e
	c.mu.Unlock()
	if c.notify != nil {
		c.notify(e.name)
	}
	go func() {
		<-ctx.Done()
		c.mu.Lock()
		current := c.engaged[e.name] == e
		if current {
			delete(c.engaged, e.name)
		}
		c.mu.Unlock()
		if current && c.notify != nil {
			c.notify(e.name)
		}
	}()
	return nil
}
