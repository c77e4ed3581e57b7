package reconciler

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlconfig "sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	corev1alpha1 "github.com/compositor-dev/compositor/api/core/v1alpha1"
	"github.com/compositor-dev/compositor/generators/crd"
	"github.com/compositor-dev/compositor/generators/rbac"
	"github.com/compositor-dev/compositor/ownership"
)

// ReleaseBindings keeps the release role of each served version bound in exactly the
// namespaces that hold compositions of that version which the definition's controller
// owns (see ownership.For): bound as soon as the first one appears there, unbound
// once the last one is gone or another definition takes them over. A version's controller cannot bind
// itself, as its identity holds no RBAC rights; Compositor binds for it. It is a
// leader-elected runnable of Compositor's manager, with one small manager per version
// that watches the version's compositions (metadata only) and its bindings.
type ReleaseBindings struct {
	// Config is Compositor's own.
	Config *rest.Config
	// Client, as Compositor, writes the bindings.
	Client client.Client
	Scheme *runtime.Scheme

	versionManagers
}

// Ensure starts keeping the bindings of the version unless that runs already.
func (b *ReleaseBindings) Ensure(ctx context.Context, def *corev1alpha1.CompositionDefinition, kind, plural, version string) error {
	objs, err := rbac.Generate(rbac.Options{Namespace: def.Namespace, DefinitionName: def.Name, Plural: plural, Version: version, Group: crd.Group})
	if err != nil {
		return fmt.Errorf("naming the RBAC of %s %s: %w", plural, version, err)
	}
	key := VersionKey{Namespace: def.Namespace, Plural: plural, Version: version}
	return b.ensure(ctx, key, "release binder", func() (manager.Manager, error) {
		// A new reconciler for each manager: one that stopped may still be finishing.
		r := &bindingReconciler{
			writer:              b.Client,
			gvk:                 schema.GroupVersionKind{Group: crd.Group, Version: version, Kind: kind},
			definitionNamespace: def.Namespace,
			objs:                objs,
			labels:              rbac.IdentityLabels(def.Namespace, plural, version),
		}
		return r.newManager(b.Config, b.Scheme, plural)
	})
}

// Stop stops keeping the bindings of the version; the definition reconciler deletes
// them with the rest of the version's RBAC.
func (b *ReleaseBindings) Stop(namespace, plural, version string) {
	b.stop(VersionKey{Namespace: namespace, Plural: plural, Version: version})
}

// bindingReconciler reconciles the release binding of one version in one namespace:
// the request's Name is the namespace.
type bindingReconciler struct {
	// reader is the version manager's cache: the version's compositions and bindings.
	reader client.Reader
	// live reads from the API server, to be sure before unbinding.
	live   client.Reader
	writer client.Client
	gvk    schema.GroupVersionKind
	// definitionNamespace is where the definition whose controller is bound lives.
	definitionNamespace string
	objs                *rbac.Objects
	labels              map[string]string
}

func (r *bindingReconciler) newManager(cfg *rest.Config, scheme *runtime.Scheme, plural string) (manager.Manager, error) {
	compositions := r.newCompositionMetadata()
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme: scheme,
		Cache: cache.Options{ByObject: map[client.Object]cache.ByObject{
			compositions:          {Label: labels.SelectorFromSet(labels.Set{labelCompositionVersion: r.gvk.Version})},
			&rbacv1.RoleBinding{}: {Label: labels.SelectorFromSet(r.labels)},
		}},
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             ctrlconfig.Controller{SkipNameValidation: ptrTo(true)},
	})
	if err != nil {
		return nil, fmt.Errorf("creating the release binder of %s: %w", r.gvk, err)
	}
	r.reader, r.live = mgr.GetCache(), mgr.GetAPIReader()
	// A composition matters when it comes or goes (a relabelled one leaves this
	// version's cache); a binding when someone changes or removes it; a definition
	// when it may change who owns the compositions.
	arrivals := predicate.Funcs{UpdateFunc: func(event.UpdateEvent) bool { return false }}
	err = ctrl.NewControllerManagedBy(mgr).
		Named("release-binder-"+plural+"-"+r.gvk.Version).
		WatchesMetadata(compositions, handler.EnqueueRequestsFromMapFunc(namespaceOf), builder.WithPredicates(arrivals)).
		Watches(&rbacv1.RoleBinding{}, handler.EnqueueRequestsFromMapFunc(namespaceOf)).
		Watches(&corev1alpha1.CompositionDefinition{}, handler.EnqueueRequestsFromMapFunc(r.namespacesWithCompositions),
			builder.WithPredicates(predicate.Or(predicate.GenerationChangedPredicate{}, ownershipChanged))).
		Complete(r)
	if err != nil {
		return nil, err
	}
	return mgr, nil
}

func (r *bindingReconciler) newCompositionMetadata() *metav1.PartialObjectMetadata {
	obj := &metav1.PartialObjectMetadata{}
	obj.SetGroupVersionKind(r.gvk)
	return obj
}

func namespaceOf(_ context.Context, obj client.Object) []reconcile.Request {
	return []reconcile.Request{{NamespacedName: client.ObjectKey{Name: obj.GetNamespace()}}}
}

// ownershipChanged passes the updates of a definition that can change which definition
// owns compositions: the version it serves, and its deletion.
var ownershipChanged = predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
	before, after := e.ObjectOld.(*corev1alpha1.CompositionDefinition), e.ObjectNew.(*corev1alpha1.CompositionDefinition)
	return before.Status.APIVersion != after.Status.APIVersion || before.Status.Kind != after.Status.Kind ||
		before.DeletionTimestamp.IsZero() != after.DeletionTimestamp.IsZero()
}}

// namespacesWithCompositions maps an event to every namespace that holds compositions
// of the version.
func (r *bindingReconciler) namespacesWithCompositions(ctx context.Context, _ client.Object) []reconcile.Request {
	list := &metav1.PartialObjectMetadataList{}
	list.SetGroupVersionKind(r.gvk.GroupVersion().WithKind(r.gvk.Kind + "List"))
	if err := r.reader.List(ctx, list); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Listing compositions to map a definition event")
		return nil
	}
	seen := map[string]bool{}
	var requests []reconcile.Request
	for _, item := range list.Items {
		if !seen[item.Namespace] {
			seen[item.Namespace] = true
			requests = append(requests, reconcile.Request{NamespacedName: client.ObjectKey{Name: item.Namespace}})
		}
	}
	return requests
}

// Reconcile binds the release role in the namespace when compositions of the version
// are there and the definition owns them, and removes the binding otherwise.
func (r *bindingReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	namespace := req.Name
	binding := r.objs.ReleaseBinding(namespace)
	held, err := r.holdsCompositions(ctx, r.reader, namespace)
	if err == nil && !held {
		// The cache may not have seen a composition created a moment ago, whose
		// controller is about to act: ask the API server before unbinding.
		held, err = r.holdsCompositions(ctx, r.live, namespace)
	}
	if err == nil && held {
		held, err = r.owns(ctx, namespace)
	}
	switch {
	case err != nil:
		return reconcile.Result{}, err
	case held:
		err := apply(ctx, r.writer, binding)
		if apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) {
			return reconcile.Result{}, nil // the binding goes with its namespace
		}
		return reconcile.Result{}, err
	default:
		return reconcile.Result{}, client.IgnoreNotFound(r.writer.Delete(ctx, binding))
	}
}

// owns reports whether the compositions of the version in namespace belong to the
// definition's controller. With no Ready definition serving the version, it keeps them:
// unbinding would only stall whichever controller comes next.
func (r *bindingReconciler) owns(ctx context.Context, namespace string) (bool, error) {
	defs := &corev1alpha1.CompositionDefinitionList{}
	if err := r.reader.List(ctx, defs); err != nil {
		return false, err
	}
	owner := ownership.For(defs.Items, r.gvk, namespace)
	return owner == nil || owner.Namespace == r.definitionNamespace, nil
}

// holdsCompositions reports whether namespace holds compositions of the version.
func (r *bindingReconciler) holdsCompositions(ctx context.Context, reader client.Reader, namespace string) (bool, error) {
	list := &metav1.PartialObjectMetadataList{}
	list.SetGroupVersionKind(r.gvk.GroupVersion().WithKind(r.gvk.Kind + "List"))
	err := reader.List(ctx, list, client.InNamespace(namespace),
		client.MatchingLabels{labelCompositionVersion: r.gvk.Version}, client.Limit(1))
	return len(list.Items) > 0, err
}
