// The follower mode: with the target clusters shared among replicas (Targets.Sharded),
// a replica that does not lead reconciles a composition with follow, installing on
// and uninstalling from the clusters engaged here only, and writes nothing but their
// entries of status.clusters. PlacementProgressed wakes the replicas when those
// entries, or the finalizers, change.

package composition

import (
	"context"
	"maps"
	"slices"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	corev1alpha1 "github.com/compositor-dev/compositor/api/core/v1alpha1"
	"github.com/compositor-dev/compositor/api/vocab"
	"github.com/compositor-dev/compositor/multicluster"
)

// follow is a composition's reconcile on a replica that does not lead, when replicas
// share the target clusters: it installs on, and uninstalls from, the clusters engaged
// here, and writes their entries of status.clusters, nothing else. The leader adds the
// finalizer before anything is installed and removes it once status.clusters is
// empty, installs in the local cluster and writes the conditions, and says why when
// there is nothing to do: a paused composition, a placement that is no selector (the
// releases stay), no definition to install from.
func (r *Reconciler) follow(ctx context.Context, obj *unstructured.Unstructured, def *corev1alpha1.CompositionDefinition) (ctrl.Result, error) {
	if r.Targets == nil || !controllerutil.ContainsFinalizer(obj, vocab.CompositionFinalizer) || isPaused(obj) || (def != nil && isPaused(def)) {
		return ctrl.Result{}, nil
	}
	if placement, err := multicluster.ParsePlacement(obj.GetAnnotations()); err == nil && placement.Local() && len(Clusters(obj)) == 0 {
		return ctrl.Result{}, nil // the leader's alone
	}
	if obj.GetDeletionTimestamp().IsZero() {
		// The cache may lag behind a deletion that has finished: what is installed
		// follows the composition as it is.
		if err := r.Live.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
			return ctrl.Result{}, client.IgnoreNotFound(err)
		}
		if !controllerutil.ContainsFinalizer(obj, vocab.CompositionFinalizer) || isPaused(obj) {
			return ctrl.Result{}, nil
		}
	}
	placement, err := multicluster.ParsePlacement(obj.GetAnnotations())
	if err != nil && obj.GetDeletionTimestamp().IsZero() {
		return ctrl.Result{}, nil // the releases stay; being deleted, they go
	}
	installing := err == nil && !placement.Local() && obj.GetDeletionTimestamp().IsZero()
	if installing && def == nil {
		return ctrl.Result{}, nil
	}
	before := obj.DeepCopy()
	var result ctrl.Result
	if installing {
		result, err = r.deliverPlaced(ctx, obj, def, placement, false)
	} else {
		// Being deleted, or no longer placed: a definition being deleted serves no more,
		// and what it installed is uninstalled all the same.
		result, _, err = r.leaveTargets(ctx, obj, def, false)
	}
	// Only status.clusters is this replica's to write.
	ours := before.DeepCopy()
	ours.SetResourceVersion(obj.GetResourceVersion())
	setClusters(ours, Clusters(obj))
	return r.settle(ctx, before, ours, result, err)
}

// PlacementProgressed passes the updates that change a composition's finalizers, or
// where its status.clusters says a release is (which clusters, Ready, reason, chart
// version, fingerprint, revision): with the target clusters shared among replicas,
// what one replica did on its clusters is for the leader to count, and the finalizer
// the leader adds lets the others install. A message that changes alone wakes
// nobody: a failure whose text changes on every attempt is not tried again at once,
// forever.
type PlacementProgressed struct{ predicate.Funcs }

func (PlacementProgressed) Update(e event.UpdateEvent) bool {
	before, okOld := e.ObjectOld.(*unstructured.Unstructured)
	after, okNew := e.ObjectNew.(*unstructured.Unstructured)
	if !okOld || !okNew {
		return false
	}
	return !slices.Equal(before.GetFinalizers(), after.GetFinalizers()) || !maps.Equal(whereReleasesAre(before), whereReleasesAre(after))
}
