// Package binding keeps the release RoleBinding of each served version of a generated
// kind in the namespaces that hold its compositions, for the version's controller,
// whose identity cannot bind itself. The release role holds all the controller may do
// in a namespace: write its compositions and their status, and install their
// releases; so a controller reaches only the namespaces where its definition owns
// compositions.
package binding

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	corev1alpha1 "github.com/compositor-dev/compositor/api/core/v1alpha1"
	"github.com/compositor-dev/compositor/api/vocab"
	"github.com/compositor-dev/compositor/generators/rbac"
	"github.com/compositor-dev/compositor/ownership"
	"github.com/compositor-dev/compositor/reconciler/internal/ssa"
)

// Reconciler keeps the release role of one served version bound in exactly the
// namespaces that hold compositions of that version which the definition's controller
// owns (see ownership.For): bound as soon as the first one appears there, unbound once
// the last one is gone or another definition takes them over. A version's controller
// cannot bind itself, as its identity holds no RBAC rights; Compositor binds for it.
// kinds.Runtime runs one per served version; the request's Name is the namespace.
type Reconciler struct {
	// Compositions is the version's informer; NewList makes a list of what it holds.
	Compositions client.Reader
	NewList      func() client.ObjectList
	// Definitions reads CompositionDefinitions, with ownership's index.
	Definitions client.Reader
	// Live reads from the API server, to be sure before unbinding.
	Live   client.Reader
	Writer client.Client
	GVK    schema.GroupVersionKind
	// DefinitionNamespace is where the definition whose controller is bound lives.
	DefinitionNamespace string
	// RBAC is the version's generated RBAC, which makes its release binding.
	RBAC *rbac.Objects
	// Former, when set and true, makes the binding name also the ServiceAccount the
	// controller had in the definition's namespace before identities moved to
	// Compositor's (rbac.Objects.WithFormer), while its Deployment still runs.
	Former func() bool
}

// Reconcile binds the release role in the namespace when compositions of the version
// are there and the definition owns them, and removes the binding otherwise.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	namespace := req.Name
	objs := r.RBAC
	if r.Former != nil && r.Former() {
		objs = objs.WithFormer()
	}
	binding := objs.ReleaseBinding(namespace)
	held, err := r.holdsCompositions(ctx, r.Compositions, r.NewList(), namespace)
	if err == nil && !held {
		// The cache may not have seen a composition created a moment ago, whose
		// controller is about to act: ask the API server before unbinding.
		held, err = r.holdsCompositions(ctx, r.Live, r.metadataList(), namespace)
	}
	if err == nil && held {
		held, err = r.owns(ctx, namespace)
	}
	switch {
	case err != nil:
		return reconcile.Result{}, err
	case held:
		err := ssa.Apply(ctx, r.Writer, binding)
		if err == nil {
			// Bound first, then listed: the controller watches a namespace only once
			// it may.
			err = r.list(ctx, namespace, true)
		}
		if apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) {
			// The binding went with its namespace, and with it the controller's right to
			// write the compositions there: Compositor lets them go itself.
			waiting, err := r.releaseTerminating(ctx, namespace)
			if waiting {
				// Compositions not deleted yet: the namespace's deletion comes to them.
				return reconcile.Result{RequeueAfter: terminatingRetry}, err
			}
			return reconcile.Result{}, err
		}
		return reconcile.Result{}, err
	default:
		// Unlisted first, then unbound: the controller stops watching before it may
		// no longer.
		if err := r.list(ctx, namespace, false); err != nil {
			return reconcile.Result{}, err
		}
		return reconcile.Result{}, client.IgnoreNotFound(r.Writer.Delete(ctx, binding))
	}
}

// list adds namespace to, or removes it from, the ConfigMap of the namespaces where
// the release role is bound (rbac.Objects.BoundNamespaces), which a controller
// Deployment reads to know where to watch its compositions; nothing without one.
// Each namespace is one key, patched alone, so the reconciles of two namespaces never
// write over each other.
//
// Most reconciles change nothing (a resync, a second composition in a namespace, a
// definition's update), so the ConfigMap is read first and written only when it does
// not say so already: a merge patch that changes nothing is not stored, but it is
// still a write request, once per reconcile of every namespace of every served version,
// that goes through admission (the cluster's webhooks on ConfigMaps too) and counts
// among the API server's mutating requests in flight. It is read from the API server
// (Live): no cache of Compositor's holds ConfigMaps, and a stale read could leave a
// namespace unlisted, its compositions unwatched, until its next reconcile.
//
// The definition reconciler deletes the ConfigMap with the rest of the version's
// identity when the version is retired.
func (r *Reconciler) list(ctx context.Context, namespace string, bound bool) error {
	at := r.RBAC.BoundNamespaces
	if at.Name == "" {
		return nil
	}
	cm := &corev1.ConfigMap{}
	err := r.Live.Get(ctx, client.ObjectKey(at), cm)
	if err == nil {
		if says(cm, namespace, bound) {
			return nil
		}
		err = r.patchListed(ctx, cm, namespace, bound)
	}
	// Not found, when read or when patched (deleted between the two): made anew.
	switch {
	case err == nil:
		return nil
	case !apierrors.IsNotFound(err):
		return fmt.Errorf("listing namespace %s in ConfigMap %s: %w", namespace, at, err)
	case !bound:
		return nil
	}
	cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: at.Name, Namespace: at.Namespace}}
	cm.Labels = r.RBAC.ServiceAccount.Labels
	cm.Data = map[string]string{namespace: boundValue}
	if err := r.Writer.Create(ctx, cm); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("listing namespace %s in ConfigMap %s: %w", namespace, at, err)
	} else if err != nil {
		return r.list(ctx, namespace, bound)
	}
	return nil
}

// patchListed merge-patches namespace's key alone into cm, or out of it, whatever the
// other keys are now: cm was read only to know whether to write.
func (r *Reconciler) patchListed(ctx context.Context, cm *corev1.ConfigMap, namespace string, bound bool) error {
	var value any // JSON null removes the key
	if bound {
		value = boundValue
	}
	patch, err := json.Marshal(map[string]any{"data": map[string]any{namespace: value}})
	if err != nil {
		return err
	}
	return r.Writer.Patch(ctx, cm, client.RawPatch(types.MergePatchType, patch))
}

// says reports whether cm says already what list would write: namespace's key with
// boundValue when bound, no key at all otherwise (the controller watches wherever
// there is a key, whatever its value).
func says(cm *corev1.ConfigMap, namespace string, bound bool) bool {
	value, listed := cm.Data[namespace]
	if bound {
		return listed && value == boundValue
	}
	return !listed
}

// boundValue is the value of a namespace's key in the BoundNamespaces ConfigMap.
const boundValue = "bound"

// owns reports whether the compositions of the version in namespace belong to the
// definition's controller. With no Ready definition serving the version, it keeps them:
// unbinding would only stall whichever controller comes next.
func (r *Reconciler) owns(ctx context.Context, namespace string) (bool, error) {
	defs := &corev1alpha1.CompositionDefinitionList{}
	if err := r.Definitions.List(ctx, defs, ownership.ServingVersion(r.GVK)); err != nil {
		return false, err
	}
	owner := ownership.For(defs.Items, r.GVK, namespace)
	return owner == nil || owner.Namespace == r.DefinitionNamespace, nil
}

// releaseTerminating removes the composition finalizer from the compositions of the
// version being deleted in namespace, which is being deleted too: their releases go with
// the namespace (the controller would only drop its finalizer, as composition's
// uninstall does there), and the controller may no longer write them once the
// namespace's deletion has taken the release binding, which cannot be made again in a
// terminating namespace. waiting tells that some are not being deleted yet.
func (r *Reconciler) releaseTerminating(ctx context.Context, namespace string) (waiting bool, err error) {
	list := &metav1.PartialObjectMetadataList{}
	list.SetGroupVersionKind(r.GVK.GroupVersion().WithKind(r.GVK.Kind + "List"))
	if err := r.Live.List(ctx, list, client.InNamespace(namespace), client.MatchingLabels{vocab.LabelCompositionVersion: r.GVK.Version}); err != nil {
		return false, err
	}
	var errs []error
	for i := range list.Items {
		obj := &list.Items[i]
		obj.SetGroupVersionKind(r.GVK)
		if obj.DeletionTimestamp.IsZero() {
			waiting = true
			continue
		}
		if !controllerutil.ContainsFinalizer(obj, vocab.CompositionFinalizer) {
			continue
		}
		before := obj.DeepCopy()
		controllerutil.RemoveFinalizer(obj, vocab.CompositionFinalizer)
		err := r.Writer.Patch(ctx, obj, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}))
		errs = append(errs, client.IgnoreNotFound(err))
	}
	return waiting, errors.Join(errs...)
}

// terminatingRetry is how soon the compositions of a terminating namespace are looked
// at again while some are not being deleted yet.
const terminatingRetry = 5 * time.Second

func (r *Reconciler) metadataList() client.ObjectList {
	list := &metav1.PartialObjectMetadataList{}
	list.SetGroupVersionKind(r.GVK.GroupVersion().WithKind(r.GVK.Kind + "List"))
	return list
}

// holdsCompositions reports whether namespace holds compositions of the version.
func (r *Reconciler) holdsCompositions(ctx context.Context, reader client.Reader, list client.ObjectList, namespace string) (bool, error) {
	err := reader.List(ctx, list, client.InNamespace(namespace),
		client.MatchingLabels{vocab.LabelCompositionVersion: r.GVK.Version}, client.Limit(1))
	return meta.LenList(list) > 0, err
}
