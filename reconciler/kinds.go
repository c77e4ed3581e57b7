package reconciler

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"golang.org/x/time/rate"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/recorder"
	"sigs.k8s.io/controller-runtime/pkg/source"

	corev1alpha1 "github.com/compositor-dev/compositor/api/core/v1alpha1"
	"github.com/compositor-dev/compositor/generators/crd"
	"github.com/compositor-dev/compositor/generators/rbac"
	"github.com/compositor-dev/compositor/policies"
)

// VersionKey names one definition namespace's controller of a served version.
type VersionKey struct{ Namespace, Plural, Version string }

// Kinds is the one controller runtime of every generated kind in Compositor's
// process. Generated kinds come and go with the definitions, thousands of them, and
// controller-runtime cannot remove a watch from a running manager; so rather than a
// manager per version, Kinds runs two controllers for all of them, each with one work
// queue and one pool of workers (the composition controller, which installs releases,
// and the release binder), and one informer per served version that starts when the
// version is served and stops when it is retired. The client, REST mapper, Helm's
// discovery and the caches of definitions and release RoleBindings are Compositor's
// manager's, shared by all.
//
// With InProcess, the composition controllers run here: each version's writes and
// Helm act as its generated ServiceAccount, so that the API server enforces the
// generated RBAC. Without it, generated Deployments run them, and Kinds keeps only
// the release bindings, from a metadata-only informer per version.
//
// Kinds is leader-elected: add it to the manager with SetupWithManager.
type Kinds struct {
	// Config is Compositor's own; each version's client impersonates from it.
	Config *rest.Config
	// InProcess runs the composition controllers here (see Kinds).
	InProcess bool
	// Charts, Checker, MaxReconcileRate and Sync configure each version's composition
	// controller; see CompositionReconciler. MaxReconcileRate applies per version.
	Charts           *Charts
	Checker          *policies.Checker
	MaxReconcileRate int
	Sync             time.Duration
	// Workers is how many compositions are reconciled at once, of every kind together;
	// 0 means 16.
	Workers int

	client     client.Client
	cache      cache.Cache
	live       client.Reader
	scheme     *runtime.Scheme
	mapper     meta.RESTMapper
	httpClient *http.Client
	recorders  recorder.Provider
	helm       *Helm

	compositions controller.TypedController[compositionRequest]
	bindings     controller.TypedController[bindingRequest]
	rates        *perVersionRate

	mu       sync.RWMutex
	started  chan struct{}
	base     context.Context
	versions map[VersionKey]*servedVersion
	wg       sync.WaitGroup
}

// compositionRequest is a composition to reconcile with a version's controller.
type compositionRequest struct {
	Version VersionKey
	types.NamespacedName
}

// bindingRequest is a namespace whose release binding of a version to reconcile.
type bindingRequest struct {
	Version   VersionKey
	Namespace string
}

// servedVersion is what runs for one version: its informer's cache, and the
// reconcilers the two controllers hand its requests to.
type servedVersion struct {
	gvk          schema.GroupVersionKind
	cache        cache.Cache
	cancel       context.CancelFunc
	done         chan struct{}
	compositions *CompositionReconciler // nil unless InProcess
	binder       *bindingReconciler
}

// SetupWithManager creates the two controllers in mgr and adds Kinds to it.
func (k *Kinds) SetupWithManager(mgr manager.Manager) error {
	k.client, k.cache, k.live = mgr.GetClient(), mgr.GetCache(), mgr.GetAPIReader()
	k.scheme, k.mapper, k.httpClient = mgr.GetScheme(), mgr.GetRESTMapper(), mgr.GetHTTPClient()
	k.recorders = mgr
	k.started = make(chan struct{})
	k.versions = map[VersionKey]*servedVersion{}
	k.rates = &perVersionRate{perSecond: max(k.MaxReconcileRate, 1), limiters: map[VersionKey]*rate.Limiter{}}
	if k.InProcess {
		helm, err := NewHelm(k.Config, mgr.GetLogger().WithName("helm"))
		if err != nil {
			return err
		}
		k.helm = helm
		k.compositions, err = controller.NewTyped("compositions", mgr, controller.TypedOptions[compositionRequest]{
			Reconciler:              reconcile.TypedFunc[compositionRequest](k.reconcileComposition),
			MaxConcurrentReconciles: k.workers(),
			RateLimiter: workqueue.NewTypedMaxOfRateLimiter(
				workqueue.NewTypedItemExponentialFailureRateLimiter[compositionRequest](time.Second, 5*time.Minute),
				workqueue.TypedRateLimiter[compositionRequest](compositionRate{k.rates}),
			),
		})
		if err != nil {
			return err
		}
		// A definition that changes may change which controller owns its compositions,
		// or unblock those waiting for it.
		err = k.compositions.Watch(source.TypedKind(k.cache, &corev1alpha1.CompositionDefinition{},
			handler.TypedEnqueueRequestsFromMapFunc(k.compositionsOfDefinition)))
		if err != nil {
			return err
		}
	}
	var err error
	k.bindings, err = controller.NewTyped("release-bindings", mgr, controller.TypedOptions[bindingRequest]{
		Reconciler:              reconcile.TypedFunc[bindingRequest](k.reconcileBinding),
		MaxConcurrentReconciles: 2,
	})
	if err != nil {
		return err
	}
	// A binding matters when someone changes or removes it; a definition when it may
	// change who owns the compositions.
	if err := k.bindings.Watch(source.TypedKind(k.cache, &rbacv1.RoleBinding{},
		handler.TypedEnqueueRequestsFromMapFunc(bindingOf))); err != nil {
		return err
	}
	definitionChanges := predicate.Or[*corev1alpha1.CompositionDefinition](
		predicate.TypedGenerationChangedPredicate[*corev1alpha1.CompositionDefinition]{}, ownershipChanged)
	if err := k.bindings.Watch(source.TypedKind(k.cache, &corev1alpha1.CompositionDefinition{},
		handler.TypedEnqueueRequestsFromMapFunc(k.namespacesOfDefinition), definitionChanges)); err != nil {
		return err
	}
	return mgr.Add(k)
}

func (k *Kinds) workers() int {
	if k.Workers > 0 {
		return k.Workers
	}
	return 16
}

// Start runs until ctx is done, then stops every version's informer and waits for them.
func (k *Kinds) Start(ctx context.Context) error {
	k.mu.Lock()
	k.base = ctx
	k.mu.Unlock()
	close(k.started)
	<-ctx.Done()
	k.mu.Lock()
	for key, v := range k.versions {
		v.cancel()
		delete(k.versions, key)
	}
	k.mu.Unlock()
	k.wg.Wait()
	return nil
}

// NeedLeaderElection is true: only the leader runs controllers.
func (k *Kinds) NeedLeaderElection() bool { return true }

// Ensure starts serving the version of def's kind, unless it is served: its informer,
// its release bindings and, InProcess, its composition controller. It waits for Kinds
// to start first. An error (the kind is not discoverable yet, say) leaves nothing
// running; the caller tries again.
func (k *Kinds) Ensure(ctx context.Context, def *corev1alpha1.CompositionDefinition, kind, plural, version string) error {
	select {
	case <-k.started:
	case <-ctx.Done():
		return ctx.Err()
	}
	key := VersionKey{Namespace: def.Namespace, Plural: plural, Version: version}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.base.Err() != nil {
		return k.base.Err()
	}
	if _, ok := k.versions[key]; ok {
		return nil
	}
	v, err := k.newVersion(def, key, schema.GroupVersionKind{Group: crd.Group, Version: version, Kind: kind})
	if err != nil {
		return fmt.Errorf("serving %s %s: %w", plural, version, err)
	}
	runCtx, cancel := context.WithCancel(k.base)
	v.cancel, v.done = cancel, make(chan struct{})
	informer, err := v.cache.GetInformer(runCtx, k.newComposition(v.gvk))
	if err != nil {
		cancel()
		return fmt.Errorf("watching %s %s: %w", plural, version, err)
	}
	if err := k.watch(key, informer); err != nil {
		cancel()
		return fmt.Errorf("watching %s %s: %w", plural, version, err)
	}
	k.versions[key] = v
	k.wg.Add(1)
	go func() {
		defer k.wg.Done()
		defer close(v.done)
		logger := log.FromContext(runCtx).WithValues("namespace", key.Namespace, "resource", key.Plural, "version", key.Version)
		logger.Info("Serving a version of a generated kind", "inProcess", k.InProcess)
		if err := v.cache.Start(log.IntoContext(runCtx, logger)); err != nil && runCtx.Err() == nil {
			logger.Error(err, "The informer of the version stopped")
		}
	}()
	return nil
}

// Stop stops serving the version and waits until its informer has stopped; the
// definition reconciler deletes its RBAC and bindings. Requests of the version still
// queued are dropped when they come up.
func (k *Kinds) Stop(namespace, plural, version string) {
	key := VersionKey{Namespace: namespace, Plural: plural, Version: version}
	k.mu.Lock()
	v, ok := k.versions[key]
	delete(k.versions, key)
	k.mu.Unlock()
	if ok {
		v.cancel()
		<-v.done
		k.rates.forget(key)
	}
}

// Served lists the versions being served, for tests and diagnostics.
func (k *Kinds) Served() []VersionKey {
	k.mu.RLock()
	defer k.mu.RUnlock()
	keys := make([]VersionKey, 0, len(k.versions))
	for key := range k.versions {
		keys = append(keys, key)
	}
	return keys
}

// newComposition is the object the version's informer holds: the whole composition
// when its controller runs here, else its metadata, which is all the binder needs.
func (k *Kinds) newComposition(gvk schema.GroupVersionKind) client.Object {
	if k.InProcess {
		obj := &unstructured.Unstructured{}
		obj.SetGroupVersionKind(gvk)
		return obj
	}
	obj := &metav1.PartialObjectMetadata{}
	obj.SetGroupVersionKind(gvk)
	return obj
}

func (k *Kinds) newCompositionList(gvk schema.GroupVersionKind) client.ObjectList {
	listGVK := gvk.GroupVersion().WithKind(gvk.Kind + "List")
	if k.InProcess {
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(listGVK)
		return list
	}
	list := &metav1.PartialObjectMetadataList{}
	list.SetGroupVersionKind(listGVK)
	return list
}

// newVersion builds what serves one version, not yet started.
func (k *Kinds) newVersion(def *corev1alpha1.CompositionDefinition, key VersionKey, gvk schema.GroupVersionKind) (*servedVersion, error) {
	objs, err := rbac.Generate(rbac.Options{Namespace: def.Namespace, DefinitionName: def.Name, Plural: key.Plural, Version: key.Version, Group: crd.Group})
	if err != nil {
		return nil, fmt.Errorf("naming the RBAC: %w", err)
	}
	sync := k.Sync
	if sync <= 0 {
		sync = time.Hour
	}
	// The version's compositions only: a cache with one informer, sharing Compositor's
	// HTTP client and REST mapper. Reads of anything else fail rather than start an
	// informer of their own.
	v := &servedVersion{gvk: gvk}
	v.cache, err = cache.New(k.Config, cache.Options{
		HTTPClient: k.httpClient,
		Scheme:     k.scheme,
		Mapper:     k.mapper,
		SyncPeriod: &sync,
		ByObject: map[client.Object]cache.ByObject{
			k.newComposition(gvk): {Label: labels.SelectorFromSet(labels.Set{labelCompositionVersion: key.Version})},
		},
		DefaultTransform:            cache.TransformStripManagedFields(),
		ReaderFailOnMissingInformer: true,
	})
	if err != nil {
		return nil, err
	}
	v.binder = &bindingReconciler{
		compositions:        v.cache,
		definitions:         k.cache,
		live:                k.live,
		writer:              k.client,
		gvk:                 gvk,
		newList:             func() client.ObjectList { return k.newCompositionList(gvk) },
		definitionNamespace: def.Namespace,
		objs:                objs,
	}
	if !k.InProcess {
		return v, nil
	}
	cfg := impersonating(k.Config, key)
	direct, err := client.New(cfg, client.Options{Scheme: k.scheme, Mapper: k.mapper})
	if err != nil {
		return nil, err
	}
	v.compositions = &CompositionReconciler{
		// Reads from the caches; writes, status included, as the ServiceAccount.
		Client:              cachedReads{Client: direct, compositions: v.cache, others: k.cache, gvk: gvk},
		Live:                direct,
		GVK:                 gvk,
		Charts:              k.Charts,
		Helm:                k.helm.As(cfg),
		Recorder:            k.recorders.GetEventRecorder(gvk.Kind + "-" + gvk.Version + "-controller"),
		DefinitionNamespace: def.Namespace,
		Bind: func(ctx context.Context, namespace string) error {
			return apply(ctx, k.client, objs.ReleaseBinding(namespace))
		},
		MaxReconcileRate: k.MaxReconcileRate,
		Checker:          k.Checker,
	}
	if v.compositions.Checker == nil {
		v.compositions.Checker = &policies.Checker{Schemas: policies.NewJSONSchemaValidator(0)}
	}
	return v, nil
}

// watch feeds the events of a version's informer to the two controllers.
func (k *Kinds) watch(key VersionKey, informer cache.Informer) error {
	if k.compositions != nil {
		err := k.compositions.Watch(&source.TypedInformer[client.Object, compositionRequest]{
			Informer: informer,
			Handler: handler.TypedEnqueueRequestsFromMapFunc(func(_ context.Context, obj client.Object) []compositionRequest {
				return []compositionRequest{{Version: key, NamespacedName: client.ObjectKeyFromObject(obj)}}
			}),
			Predicates: []predicate.TypedPredicate[client.Object]{
				predicate.NewPredicateFuncs(func(o client.Object) bool { return o.GetLabels()[labelCompositionVersion] == key.Version }),
				predicate.Or[client.Object](predicate.GenerationChangedPredicate{}, predicate.AnnotationChangedPredicate{}, predicate.LabelChangedPredicate{}, deletionStarted{}),
			},
		})
		if err != nil {
			return err
		}
	}
	// A composition matters to the binder when it comes or goes (a relabelled one
	// leaves this version's informer).
	return k.bindings.Watch(&source.TypedInformer[client.Object, bindingRequest]{
		Informer: informer,
		Handler: handler.TypedEnqueueRequestsFromMapFunc(func(_ context.Context, obj client.Object) []bindingRequest {
			return []bindingRequest{{Version: key, Namespace: obj.GetNamespace()}}
		}),
		Predicates: []predicate.TypedPredicate[client.Object]{predicate.Funcs{UpdateFunc: func(event.UpdateEvent) bool { return false }}},
	})
}

func (k *Kinds) version(key VersionKey) *servedVersion {
	k.mu.RLock()
	defer k.mu.RUnlock()
	return k.versions[key]
}

// versionsOfKind are the served versions of kind, in every definition namespace.
func (k *Kinds) versionsOfKind(kind string) map[VersionKey]*servedVersion {
	k.mu.RLock()
	defer k.mu.RUnlock()
	out := map[VersionKey]*servedVersion{}
	for key, v := range k.versions {
		if v.gvk.Kind == kind {
			out[key] = v
		}
	}
	return out
}

func (k *Kinds) reconcileComposition(ctx context.Context, req compositionRequest) (reconcile.Result, error) {
	v := k.version(req.Version)
	if v == nil || v.compositions == nil {
		return reconcile.Result{}, nil // the version is no longer served here
	}
	ctx = log.IntoContext(ctx, log.FromContext(ctx).WithValues("kind", v.gvk.Kind, "version", v.gvk.Version,
		"definitionNamespace", req.Version.Namespace, "namespace", req.Namespace, "name", req.Name))
	return v.compositions.Reconcile(ctx, reconcile.Request{NamespacedName: req.NamespacedName})
}

func (k *Kinds) reconcileBinding(ctx context.Context, req bindingRequest) (reconcile.Result, error) {
	v := k.version(req.Version)
	if v == nil {
		return reconcile.Result{}, nil
	}
	ctx = log.IntoContext(ctx, log.FromContext(ctx).WithValues("kind", v.gvk.Kind, "version", v.gvk.Version,
		"definitionNamespace", req.Version.Namespace, "namespace", req.Namespace))
	return v.binder.Reconcile(ctx, reconcile.Request{NamespacedName: client.ObjectKey{Name: req.Namespace}})
}

// compositionsOfDefinition maps a definition's event to the compositions of every
// served version of its kind.
func (k *Kinds) compositionsOfDefinition(ctx context.Context, def *corev1alpha1.CompositionDefinition) []compositionRequest {
	var requests []compositionRequest
	for key, v := range k.versionsOfKind(def.Status.Kind) {
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(v.gvk.GroupVersion().WithKind(v.gvk.Kind + "List"))
		if err := v.cache.List(ctx, list); err != nil {
			log.FromContext(ctx).Error(err, "Listing compositions to map a definition event", "kind", v.gvk.Kind, "version", v.gvk.Version)
			continue
		}
		for _, item := range list.Items {
			requests = append(requests, compositionRequest{Version: key, NamespacedName: client.ObjectKeyFromObject(&item)})
		}
	}
	return requests
}

// namespacesOfDefinition maps a definition's event to every namespace that holds
// compositions of a served version of its kind.
func (k *Kinds) namespacesOfDefinition(ctx context.Context, def *corev1alpha1.CompositionDefinition) []bindingRequest {
	var requests []bindingRequest
	for key, v := range k.versionsOfKind(def.Status.Kind) {
		list := k.newCompositionList(v.gvk)
		if err := v.cache.List(ctx, list); err != nil {
			log.FromContext(ctx).Error(err, "Listing compositions to map a definition event", "kind", v.gvk.Kind, "version", v.gvk.Version)
			continue
		}
		seen := map[string]bool{}
		_ = meta.EachListItem(list, func(obj runtime.Object) error {
			if item, err := meta.Accessor(obj); err == nil && !seen[item.GetNamespace()] {
				seen[item.GetNamespace()] = true
				requests = append(requests, bindingRequest{Version: key, Namespace: item.GetNamespace()})
			}
			return nil
		})
	}
	return requests
}

// bindingOf maps a release RoleBinding to its version and namespace.
func bindingOf(_ context.Context, binding *rbacv1.RoleBinding) []bindingRequest {
	l := binding.GetLabels()
	if l[rbac.LabelManagedBy] != rbac.ManagedBy || l[rbac.LabelResource] == "" || l[rbac.LabelVersion] == "" {
		return nil
	}
	key := VersionKey{Namespace: l[rbac.LabelDefinitionNamespace], Plural: l[rbac.LabelResource], Version: l[rbac.LabelVersion]}
	return []bindingRequest{{Version: key, Namespace: binding.Namespace}}
}

// ownershipChanged passes the updates of a definition that can change which definition
// owns compositions: the version it serves, and its deletion.
var ownershipChanged = predicate.TypedFuncs[*corev1alpha1.CompositionDefinition]{UpdateFunc: func(e event.TypedUpdateEvent[*corev1alpha1.CompositionDefinition]) bool {
	before, after := e.ObjectOld, e.ObjectNew
	return before.Status.APIVersion != after.Status.APIVersion || before.Status.Kind != after.Status.Kind ||
		before.DeletionTimestamp.IsZero() != after.DeletionTimestamp.IsZero()
}}

// impersonating is cfg acting as the version's generated ServiceAccount.
func impersonating(cfg *rest.Config, key VersionKey) *rest.Config {
	out := rest.CopyConfig(cfg)
	out.Impersonate = rest.ImpersonationConfig{
		UserName: "system:serviceaccount:" + key.Namespace + ":" + rbac.ServiceAccountName(key.Plural, key.Version),
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + key.Namespace, "system:authenticated"},
	}
	return out
}

// cachedReads is a client whose reads come from caches: the version's compositions
// from its informer, anything else (definitions) from Compositor's manager's.
type cachedReads struct {
	client.Client
	compositions, others client.Reader
	gvk                  schema.GroupVersionKind
}

func (c cachedReads) readerOf(obj runtime.Object) client.Reader {
	gvk := obj.GetObjectKind().GroupVersionKind()
	if gvk == c.gvk || gvk == c.gvk.GroupVersion().WithKind(c.gvk.Kind+"List") {
		return c.compositions
	}
	return c.others
}

func (c cachedReads) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	return c.readerOf(obj).Get(ctx, key, obj, opts...)
}

func (c cachedReads) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	return c.readerOf(list).List(ctx, list, opts...)
}

// perVersionRate lets each version reconcile at most perSecond compositions a second,
// with a burst of ten seconds' worth, as each version's own controller did before
// they shared a queue: a busy kind does not starve the others of their rate.
type perVersionRate struct {
	perSecond int
	mu        sync.Mutex
	limiters  map[VersionKey]*rate.Limiter
}

func (r *perVersionRate) delay(key VersionKey) time.Duration {
	r.mu.Lock()
	l, ok := r.limiters[key]
	if !ok {
		l = rate.NewLimiter(rate.Limit(r.perSecond), r.perSecond*10)
		r.limiters[key] = l
	}
	r.mu.Unlock()
	return l.Reserve().Delay()
}

func (r *perVersionRate) forget(key VersionKey) {
	r.mu.Lock()
	delete(r.limiters, key)
	r.mu.Unlock()
}

// compositionRate is perVersionRate as the composition queue's rate limiter.
type compositionRate struct{ *perVersionRate }

func (r compositionRate) When(req compositionRequest) time.Duration { return r.delay(req.Version) }
func (compositionRate) Forget(compositionRequest)                   {}
func (compositionRate) NumRequeues(compositionRequest) int          { return 0 }
