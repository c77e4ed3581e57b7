// Package kinds is the runtime of the generated kinds: one controller in Compositor's
// process that serves every served version of every generated kind, with an informer
// per version, the release bindings of each (package binding) and, in process, its
// composition controller (package composition). It is a mechanism: the definition
// reconciler (package definition) decides which versions are served, and starts and
// stops them with Runtime.Ensure and Runtime.Stop.
package kinds

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/recorder"
	"sigs.k8s.io/controller-runtime/pkg/source"

	corev1alpha1 "github.com/compositor-dev/compositor/api/core/v1alpha1"
	"github.com/compositor-dev/compositor/api/vocab"
	"github.com/compositor-dev/compositor/chartstore"
	"github.com/compositor-dev/compositor/conversion"
	"github.com/compositor-dev/compositor/generators/rbac"
	"github.com/compositor-dev/compositor/internal/fairshare"
	"github.com/compositor-dev/compositor/lightinformer"
	"github.com/compositor-dev/compositor/policies"
	"github.com/compositor-dev/compositor/reconciler/binding"
	"github.com/compositor-dev/compositor/reconciler/composition"
	"github.com/compositor-dev/compositor/reconciler/internal/ssa"
)

// VersionKey names one definition namespace's controller of a served version.
type VersionKey struct{ Namespace, Plural, Version string }

// Runtime is the one controller runtime of every generated kind in Compositor's
// process. Generated kinds come and go with the definitions, thousands of them, and
// controller-runtime cannot remove a watch from a running manager; so rather than a
// manager per version, Runtime runs one controller for all of them, with one work queue
// and one pool of workers, which installs releases and keeps the release bindings, and
// one informer per served version (client-go's, one event handler) that starts when
// the version is served and stops when it is retired. The client, REST mapper, Helm's
// discovery and the caches of definitions and release RoleBindings are Compositor's
// manager's, shared by all.
//
// With InProcess, the composition controllers run here: each version's writes and
// Helm act as its generated ServiceAccount, so that the API server enforces the
// generated RBAC. Without it, generated Deployments run them, and Runtime keeps only
// the release bindings, from a metadata-only informer per version.
//
// Which versions are served is not Runtime's to decide: the definition reconciler
// (package definition) calls Ensure and Stop, and Runtime serves what it is told.
//
// Runtime is leader-elected: add it to the manager with SetupWithManager. With
// Targets shared among replicas (Targets.Sharded), it runs on every replica
// (NeedLeaderElection is false): each installs placed compositions on the target
// clusters engaged there (package composition, Reconciler.Leads), and on a replica
// that does not lead, the definition reconciler's following mode tells it which
// versions to serve. The release bindings and everything else stay with the leader,
// which reconciles them all once elected (enqueueAll).
type Runtime struct {
	// Config is Compositor's own; each version's client impersonates from it.
	Config *rest.Config
	// InProcess runs the composition controllers here (see Runtime).
	InProcess bool
	// Charts, Judge, MaxReconcileRate and Sync configure each version's composition
	// controller; see composition.Reconciler. MaxReconcileRate applies per version.
	Charts           *chartstore.Source
	Judge            *policies.Judge
	MaxReconcileRate int
	Sync             time.Duration
	// Workers is how many requests are reconciled at once, of every kind together;
	// 0 means 16.
	Workers int
	// NamespaceConcurrency is how many of them the compositions of one namespace, and
	// the releases on one target cluster, may take at once (composition.Reconciler.Lanes);
	// 0 means a quarter of Workers, at least one.
	NamespaceConcurrency int
	// Targets, InProcess only, are the clusters compositions may be placed on; nil
	// installs every composition in Compositor's cluster, and a placed one reports
	// that it cannot be delivered. Call ClustersChanged when they change.
	Targets *composition.Targets
	// Seal, InProcess only, gives each definition's key (derived in memory from the
	// master key), which seals the release records and revisions of its compositions.
	Seal composition.SealKeys

	client    client.Client
	cache     cache.Cache
	live      client.Reader
	scheme    *runtime.Scheme
	mapper    meta.RESTMapper
	dynamic   dynamic.Interface  // InProcess: the informers hold whole compositions
	metadata  metadata.Interface // otherwise only their metadata
	recorders recorder.Provider
	helm      *composition.Helm
	schemas   *conversion.CRDSchemas // of the generated kinds, for the compositions' Representable
	elected   <-chan struct{}        // closed once this replica leads

	controller controller.TypedController[request]
	rates      *perVersionRate
	lanes      *fairshare.Lanes                              // shared by every version's composition controller
	queue      workqueue.TypedRateLimitingInterface[request] // the controller's, once it starts
	queued     chan struct{}                                 // closed when queue is set

	versions lightinformer.Set[VersionKey, *servedVersion]
	// formers are the versions whose controller Deployment still runs as the
	// ServiceAccount of the definition's namespace, while identities move to
	// Compositor's (SetFormerIdentity): their release bindings name both.
	formers sync.Map
}

// request is one piece of work of a served version: a composition to reconcile, or,
// with Binding, the release binding of the namespace Namespace (Name empty).
type request struct {
	Version VersionKey
	types.NamespacedName
	Binding bool
}

// servedVersion is what runs for one version: its informer, a reader of what the
// informer holds, and the reconcilers its requests go to.
type servedVersion struct {
	key          VersionKey
	gvk          schema.GroupVersionKind
	informer     *lightinformer.Informer
	reader       client.Reader
	compositions *composition.Reconciler // nil unless InProcess
	binder       *binding.Reconciler
}

// Run runs the version's informer until ctx is done.
func (v *servedVersion) Run(ctx context.Context) {
	logger := log.FromContext(ctx).WithValues("namespace", v.key.Namespace, "resource", v.key.Plural, "version", v.key.Version)
	logger.Info("Serving a version of a generated kind", "inProcess", v.compositions != nil)
	v.informer.Run(log.IntoContext(ctx, logger))
}

// SetupWithManager creates the controller in mgr and adds Runtime to it.
func (k *Runtime) SetupWithManager(mgr manager.Manager) error {
	k.client, k.cache, k.live = mgr.GetClient(), mgr.GetCache(), mgr.GetAPIReader()
	k.schemas = conversion.NewCRDSchemas(k.cache, k.live)
	k.scheme, k.mapper = mgr.GetScheme(), mgr.GetRESTMapper()
	k.recorders, k.elected = mgr, mgr.Elected()
	k.queued = make(chan struct{})
	k.rates = &perVersionRate{perSecond: max(k.MaxReconcileRate, 1), limiters: map[VersionKey]*rate.Limiter{}}
	perLane := k.NamespaceConcurrency
	if perLane <= 0 {
		perLane = k.workers() / 4
	}
	k.lanes = fairshare.New(perLane)
	var err error
	if k.InProcess {
		k.dynamic, err = dynamic.NewForConfigAndClient(k.Config, mgr.GetHTTPClient())
		if err != nil {
			return err
		}
		if k.helm, err = composition.NewHelm(k.Config, nil, mgr.GetLogger().WithName("helm")); err != nil {
			return err
		}
	} else if k.metadata, err = metadata.NewForConfigAndClient(k.Config, mgr.GetHTTPClient()); err != nil {
		return err
	}
	k.controller, err = controller.NewTyped("generated-kinds", mgr, controller.TypedOptions[request]{
		Reconciler:              reconcile.TypedFunc[request](k.reconcile),
		MaxConcurrentReconciles: k.workers(),
		NeedLeaderElection:      ptr.To(!k.shared()),
		RateLimiter: workqueue.NewTypedMaxOfRateLimiter(
			workqueue.NewTypedItemExponentialFailureRateLimiter[request](time.Second, 5*time.Minute),
			workqueue.TypedRateLimiter[request](requestRate{k.rates}),
		),
	})
	if err != nil {
		return err
	}
	// The versions' informers add to the controller's queue, which exists once the
	// controller starts.
	err = k.controller.Watch(source.TypedFunc[request](func(_ context.Context, q workqueue.TypedRateLimitingInterface[request]) error {
		k.queue = q
		close(k.queued)
		return nil
	}))
	if err != nil {
		return err
	}
	// A definition that changes may change which controller owns its compositions,
	// unblock those waiting for it, and change who holds release bindings.
	if k.InProcess {
		err = k.controller.Watch(source.TypedKind(k.cache, &corev1alpha1.CompositionDefinition{},
			handler.TypedEnqueueRequestsFromMapFunc(k.compositionsOfDefinition)))
		if err != nil {
			return err
		}
	}
	definitionChanges := predicate.Or[*corev1alpha1.CompositionDefinition](
		predicate.TypedGenerationChangedPredicate[*corev1alpha1.CompositionDefinition]{}, ownershipChanged)
	if err := k.controller.Watch(source.TypedKind(k.cache, &corev1alpha1.CompositionDefinition{},
		handler.TypedEnqueueRequestsFromMapFunc(k.namespacesOfDefinition), definitionChanges)); err != nil {
		return err
	}
	// A release binding matters when someone changes or removes it.
	if err := k.controller.Watch(source.TypedKind(k.cache, &rbacv1.RoleBinding{},
		handler.TypedEnqueueRequestsFromMapFunc(bindingOf))); err != nil {
		return err
	}
	return mgr.Add(k)
}

// shared reports whether Runtime runs on every replica (see Runtime).
func (k *Runtime) shared() bool { return k.Targets != nil && k.Targets.Sharded }

// leading reports whether this replica leads.
func (k *Runtime) leading() bool {
	select {
	case <-k.elected:
		return true
	default:
		return false
	}
}

func (k *Runtime) workers() int {
	if k.Workers > 0 {
		return k.Workers
	}
	return 16
}

// Start runs until ctx is done, then stops every version's informer and waits for them.
// Versions are served once the controller has started.
func (k *Runtime) Start(ctx context.Context) error {
	select {
	case <-k.queued:
	case <-ctx.Done():
		return nil
	}
	var wg sync.WaitGroup
	if k.shared() {
		wg.Go(func() {
			select {
			case <-k.elected:
				// What a replica that does not lead leaves alone is the leader's now.
				k.enqueueAll()
			case <-ctx.Done():
			}
		})
	}
	k.versions.Run(ctx)
	wg.Wait()
	return nil
}

// NeedLeaderElection is true unless Runtime runs on every replica (see Runtime).
func (k *Runtime) NeedLeaderElection() bool { return !k.shared() }

// enqueueAll reconciles every composition and release binding of every served
// version.
func (k *Runtime) enqueueAll() {
	for key, v := range k.versions.All() {
		for _, item := range v.informer.Store().List() {
			if obj, err := meta.Accessor(item); err == nil {
				k.enqueue(true,
					request{Version: key, NamespacedName: types.NamespacedName{Namespace: obj.GetNamespace(), Name: obj.GetName()}},
					request{Version: key, NamespacedName: types.NamespacedName{Namespace: obj.GetNamespace()}, Binding: true})
			}
		}
	}
}

// Ensure starts serving the version of def's kind, unless it is served: its informer,
// its release bindings and, InProcess, its composition controller. It waits for Runtime
// to start first. An error leaves nothing running; the caller tries again. A kind the
// API server does not serve yet is no error: its informer retries until it does.
func (k *Runtime) Ensure(ctx context.Context, def *corev1alpha1.CompositionDefinition, kind, plural, version string) error {
	key := VersionKey{Namespace: def.Namespace, Plural: plural, Version: version}
	_, err := k.versions.Ensure(ctx, key, func() (*servedVersion, error) {
		v, err := k.newVersion(def, key, schema.GroupVersionKind{Group: vocab.CompositionGroup, Version: version, Kind: kind})
		if err != nil {
			return nil, fmt.Errorf("serving %s %s: %w", plural, version, err)
		}
		return v, nil
	})
	return err
}

// SetFormerIdentity says whether the version's controller Deployment still runs as the
// ServiceAccount it had in the definition's namespace before identities moved to
// Compositor's (rbac.LegacySubject): while it does, the release bindings name that
// ServiceAccount too, so that it installs until the new Deployment serves. The
// definition reconciler says so before Ensure, and again once the new one serves; a
// change rebinds every namespace of the version.
func (k *Runtime) SetFormerIdentity(namespace, plural, version string, former bool) {
	key := VersionKey{Namespace: namespace, Plural: plural, Version: version}
	if _, was := k.formers.Load(key); was == former {
		return
	}
	if former {
		k.formers.Store(key, true)
	} else {
		k.formers.Delete(key)
	}
	select {
	case <-k.queued:
	default:
		return // every binding is reconciled when the version starts
	}
	if v := k.version(key); v != nil {
		seen := map[string]bool{}
		for _, item := range v.informer.Store().List() {
			if obj, err := meta.Accessor(item); err == nil && !seen[obj.GetNamespace()] {
				seen[obj.GetNamespace()] = true
				k.enqueue(true, request{Version: key, NamespacedName: types.NamespacedName{Namespace: obj.GetNamespace()}, Binding: true})
			}
		}
	}
}

// former tells whether the version's release bindings name the ServiceAccount of the
// definition's namespace too (SetFormerIdentity).
func (k *Runtime) former(key VersionKey) bool {
	_, ok := k.formers.Load(key)
	return ok
}

// Stop stops serving the version and waits until its informer has stopped; the
// definition reconciler deletes its RBAC and bindings. Requests of the version still
// queued are dropped when they come up.
func (k *Runtime) Stop(namespace, plural, version string) {
	key := VersionKey{Namespace: namespace, Plural: plural, Version: version}
	if k.versions.Stop(key) {
		k.rates.forget(key)
	}
	k.formers.Delete(key)
}

// Served are the versions served now.
func (k *Runtime) Served() []VersionKey {
	return slices.Collect(maps.Keys(k.versions.All()))
}

// newCompositionList is a list of what the version's informer holds: whole
// compositions when their controller runs here, else their metadata, which is all the
// binder needs.
func (k *Runtime) newCompositionList(gvk schema.GroupVersionKind) client.ObjectList {
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

// newInformer is the informer of the version's compositions, labelled with it, which
// tells the controller of their changes.
func (k *Runtime) newInformer(key VersionKey, handler toolscache.ResourceEventHandler) *lightinformer.Informer {
	sync := k.Sync
	if sync <= 0 {
		sync = time.Hour
	}
	opts := lightinformer.Options{
		Resource:      schema.GroupVersionResource{Group: vocab.CompositionGroup, Version: key.Version, Resource: key.Plural},
		LabelSelector: labels.SelectorFromSet(labels.Set{vocab.LabelCompositionVersion: key.Version}).String(),
		Handler:       handler,
		Resync:        sync,
	}
	if k.InProcess {
		return lightinformer.NewDynamic(k.dynamic, opts)
	}
	return lightinformer.NewMetadata(k.metadata, opts)
}

// newVersion builds what serves one version, not yet started.
func (k *Runtime) newVersion(def *corev1alpha1.CompositionDefinition, key VersionKey, gvk schema.GroupVersionKind) (*servedVersion, error) {
	objs, err := rbac.Generate(rbac.Options{Namespace: def.Namespace, IdentityNamespace: k.identityNamespace(),
		DefinitionName: def.Name, Plural: key.Plural, Version: key.Version, Group: vocab.CompositionGroup})
	if err != nil {
		return nil, fmt.Errorf("naming the RBAC: %w", err)
	}
	if ns := k.identityNamespace(); ns != "" && !k.InProcess {
		// The controller Deployment watches where the binder lists it as bound (the
		// generated RBAC lets it read the list: reconciler/definition).
		objs.BoundNamespaces = types.NamespacedName{Namespace: ns, Name: rbac.NamesFor(def.Namespace, key.Plural, key.Version).BoundNamespaces}
	}
	v := &servedVersion{key: key, gvk: gvk}
	v.informer = k.newInformer(key, k.handler(key, !k.InProcess))
	v.reader = v.informer.Reader()
	v.binder = &binding.Reconciler{
		Compositions:        v.reader,
		Definitions:         k.cache,
		Live:                k.live,
		Writer:              k.client,
		GVK:                 gvk,
		NewList:             func() client.ObjectList { return k.newCompositionList(gvk) },
		DefinitionNamespace: def.Namespace,
		RBAC:                objs,
		Former:              func() bool { return k.former(key) },
	}
	if !k.InProcess {
		return v, nil
	}
	cfg := impersonating(k.Config, objs.ServiceAccount)
	direct, err := client.New(cfg, client.Options{Scheme: k.scheme, Mapper: k.mapper})
	if err != nil {
		return nil, err
	}
	v.compositions = &composition.Reconciler{
		// Reads from the caches; writes, status included, as the ServiceAccount.
		Client:              cachedReads{Client: direct, compositions: v.reader, others: k.cache, gvk: gvk},
		Live:                direct,
		GVK:                 gvk,
		Charts:              k.Charts,
		Helm:                k.helm.As(cfg),
		Keys:                k.Seal,
		Recorder:            k.recorders.GetEventRecorder(gvk.Kind + "-" + gvk.Version + "-controller"),
		DefinitionNamespace: def.Namespace,
		Bind: func(ctx context.Context, namespace string) error {
			return ssa.Apply(ctx, k.client, objs.ReleaseBinding(namespace))
		},
		MaxReconcileRate: k.MaxReconcileRate,
		Judge:            k.Judge,
		Targets:          k.Targets,
		Lanes:            k.lanes,
		Schemas:          k.schemas,
	}
	if k.shared() {
		v.compositions.Leads = k.leading
	}
	if v.compositions.Judge == nil {
		v.compositions.Judge = policies.NewJudge(policies.JudgeOptions{})
	}
	return v, nil
}

// handler turns the events of a version's informer into requests: a composition to
// reconcile when it comes, goes, or changes what it asks for (unless bindingsOnly);
// its namespace's release binding when it comes or goes (a relabelled one leaves this
// version's informer).
func (k *Runtime) handler(key VersionKey, bindingsOnly bool) toolscache.ResourceEventHandler {
	enqueueComposition := func(obj client.Object, low bool) {
		if !bindingsOnly {
			k.enqueue(low, request{Version: key, NamespacedName: client.ObjectKeyFromObject(obj)})
		}
	}
	enqueueBinding := func(obj client.Object, low bool) {
		k.enqueue(low, request{Version: key, NamespacedName: types.NamespacedName{Namespace: obj.GetNamespace()}, Binding: true})
	}
	changed := predicate.Or[client.Object](predicate.GenerationChangedPredicate{}, predicate.AnnotationChangedPredicate{},
		predicate.LabelChangedPredicate{}, composition.DeletionStarted{}, composition.Resynced{})
	if k.shared() {
		// Each replica's work on a composition shows in the others' entries of
		// status.clusters, and the leader's finalizer lets the others install.
		changed = predicate.Or(changed, composition.PlacementProgressed{})
	}
	return toolscache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(obj any, isInInitialList bool) {
			if o, ok := obj.(client.Object); ok {
				// What the informer lists when it starts is a backlog: a version
				// served anew, or Compositor starting.
				enqueueBinding(o, isInInitialList)
				enqueueComposition(o, isInInitialList)
			}
		},
		UpdateFunc: func(oldObj, newObj any) {
			before, okOld := oldObj.(client.Object)
			after, okNew := newObj.(client.Object)
			if okOld && okNew && changed.Update(event.TypedUpdateEvent[client.Object]{ObjectOld: before, ObjectNew: after}) {
				// A resync (the same resourceVersion) is periodic work; a change is
				// someone's.
				enqueueComposition(after, before.GetResourceVersion() == after.GetResourceVersion())
			}
		},
		DeleteFunc: func(obj any) {
			if tombstone, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
				obj = tombstone.Obj
			}
			if o, ok := obj.(client.Object); ok {
				enqueueBinding(o, false)
				enqueueComposition(o, false)
			}
		},
	}
}

// enqueue adds reqs to the controller's queue. Work nobody is waiting for (low: an
// informer's first list, a resync, a sweep of every composition) goes at
// controller-runtime's low priority, so that a composition someone just created,
// changed or deleted — a new definition's first ones too — is not reconciled after a
// backlog of thousands (the controller's queue is controller-runtime's priority
// queue, its default).
func (k *Runtime) enqueue(low bool, reqs ...request) {
	if pq, ok := k.queue.(priorityqueue.PriorityQueue[request]); ok && low {
		pq.AddWithOpts(priorityqueue.AddOpts{Priority: ptr.To(handler.LowPriority)}, reqs...)
		return
	}
	for _, req := range reqs {
		k.queue.Add(req)
	}
}

func (k *Runtime) version(key VersionKey) *servedVersion {
	v, _ := k.versions.Get(key)
	return v
}

// versionsOfKind are the served versions of kind, in every definition namespace.
func (k *Runtime) versionsOfKind(kind string) map[VersionKey]*servedVersion {
	out := map[VersionKey]*servedVersion{}
	for key, v := range k.versions.All() {
		if v.gvk.Kind == kind {
			out[key] = v
		}
	}
	return out
}

// reconcile hands a request to its version's composition controller or binder.
func (k *Runtime) reconcile(ctx context.Context, req request) (reconcile.Result, error) {
	v := k.version(req.Version)
	if v == nil {
		return reconcile.Result{}, nil // the version is no longer served here
	}
	logger := log.FromContext(ctx).WithValues("kind", v.gvk.Kind, "version", v.gvk.Version,
		"definitionNamespace", req.Version.Namespace, "namespace", req.Namespace)
	if req.Binding {
		if k.shared() && !k.leading() {
			return reconcile.Result{}, nil // the leader's (enqueueAll)
		}
		ctx = log.IntoContext(ctx, logger.WithValues("binding", true))
		return v.binder.Reconcile(ctx, reconcile.Request{NamespacedName: client.ObjectKey{Name: req.Namespace}})
	}
	if v.compositions == nil {
		return reconcile.Result{}, nil
	}
	ctx = log.IntoContext(ctx, logger.WithValues("name", req.Name))
	return v.compositions.Reconcile(ctx, reconcile.Request{NamespacedName: req.NamespacedName})
}

// compositionsOfDefinition maps a definition's event to the compositions of every
// served version of its kind.
func (k *Runtime) compositionsOfDefinition(_ context.Context, def *corev1alpha1.CompositionDefinition) []request {
	var requests []request
	k.eachComposition(def.Status.Kind, func(key VersionKey, obj metav1.Object) {
		requests = append(requests, request{Version: key, NamespacedName: types.NamespacedName{Namespace: obj.GetNamespace(), Name: obj.GetName()}})
	})
	return requests
}

// ClustersChanged reconciles every composition that is placed on target clusters, or
// was: a cluster was engaged, disengaged or relabelled, which may change where each
// goes. It may be called from any goroutine; before the controller starts it does
// nothing (every composition is reconciled at the start anyway).
func (k *Runtime) ClustersChanged() {
	select {
	case <-k.queued:
	default:
		return
	}
	for key, v := range k.versions.All() {
		for _, item := range v.informer.Store().List() {
			obj, ok := item.(*unstructured.Unstructured)
			if !ok {
				continue
			}
			_, placed := obj.GetAnnotations()[vocab.AnnotationPlacement]
			_, wasPlaced, _ := unstructured.NestedFieldNoCopy(obj.Object, "status", "clusters")
			if placed || wasPlaced {
				k.enqueue(true, request{Version: key, NamespacedName: client.ObjectKeyFromObject(obj)})
			}
		}
	}
}

// namespacesOfDefinition maps a definition's event to every namespace that holds
// compositions of a served version of its kind.
func (k *Runtime) namespacesOfDefinition(_ context.Context, def *corev1alpha1.CompositionDefinition) []request {
	seen := map[request]bool{}
	var requests []request
	k.eachComposition(def.Status.Kind, func(key VersionKey, obj metav1.Object) {
		req := request{Version: key, NamespacedName: types.NamespacedName{Namespace: obj.GetNamespace()}, Binding: true}
		if !seen[req] {
			seen[req] = true
			requests = append(requests, req)
		}
	})
	return requests
}

// eachComposition calls fn with every composition the informers of kind's served
// versions hold, without copying them.
func (k *Runtime) eachComposition(kind string, fn func(key VersionKey, obj metav1.Object)) {
	for key, v := range k.versionsOfKind(kind) {
		for _, item := range v.informer.Store().List() {
			if obj, err := meta.Accessor(item); err == nil {
				fn(key, obj)
			}
		}
	}
}

// bindingOf maps a release RoleBinding to its version and namespace.
func bindingOf(_ context.Context, binding *rbacv1.RoleBinding) []request {
	l := binding.GetLabels()
	if l[vocab.LabelManagedBy] != vocab.ManagedBy || l[vocab.LabelResource] == "" || l[vocab.LabelVersion] == "" {
		return nil
	}
	key := VersionKey{Namespace: l[vocab.LabelDefinitionNamespace], Plural: l[vocab.LabelResource], Version: l[vocab.LabelVersion]}
	return []request{{Version: key, NamespacedName: types.NamespacedName{Namespace: binding.Namespace}, Binding: true}}
}

// ownershipChanged passes the updates of a definition that can change which definition
// owns compositions: the version it serves, and its deletion.
var ownershipChanged = predicate.TypedFuncs[*corev1alpha1.CompositionDefinition]{UpdateFunc: func(e event.TypedUpdateEvent[*corev1alpha1.CompositionDefinition]) bool {
	before, after := e.ObjectOld, e.ObjectNew
	return before.Status.APIVersion != after.Status.APIVersion || before.Status.Kind != after.Status.Kind ||
		!slices.Equal(before.Status.Retained, after.Status.Retained) ||
		before.DeletionTimestamp.IsZero() != after.DeletionTimestamp.IsZero()
}}

// impersonating is cfg acting as the version's generated ServiceAccount sa, which
// lives in Compositor's namespace (rbac.Options.IdentityNamespace).
func impersonating(cfg *rest.Config, sa *corev1.ServiceAccount) *rest.Config {
	out := rest.CopyConfig(cfg)
	out.Impersonate = rest.ImpersonationConfig{
		UserName: serviceaccount.MakeUsername(sa.Namespace, sa.Name),
		Groups:   serviceaccount.MakeGroupNames(sa.Namespace),
	}
	out.Impersonate.Groups = append(out.Impersonate.Groups, "system:authenticated")
	return out
}

// identityNamespace is Compositor's namespace, where the generated ServiceAccounts
// live (rbac.Options.IdentityNamespace): the one whose Secrets keep the charts. Empty
// leaves them in the definitions' namespaces, as before issue #46 (tests without a
// chart store).
func (k *Runtime) identityNamespace() string {
	if k.Charts == nil || k.Charts.Store == nil {
		return ""
	}
	return k.Charts.Store.Namespace
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
