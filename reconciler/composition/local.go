// Delivery to the local cluster: a composition that is not placed has its release in
// Compositor's own cluster, in its namespace (deliverLocally); remove uninstalls its
// releases wherever they are before the composition goes.

package composition

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	corev1alpha1 "github.com/compositor-dev/compositor/api/core/v1alpha1"
	"github.com/compositor-dev/compositor/api/vocab"
	"github.com/compositor-dev/compositor/multicluster"
)

// localSite is the local cluster, as the controller's identity, which bind gives its
// rights in a namespace.
func (r *Reconciler) localSite(ctx context.Context) site {
	return site{helm: r.Helm.Sealed(sealFrom(ctx)), bind: r.Bind}
}

// deliverLocally runs helm upgrade --install in the local cluster unless the release
// already is what the composition asks for (installOn). A composition placed on target
// clusters before is uninstalled from them first.
func (r *Reconciler) deliverLocally(ctx context.Context, obj *unstructured.Unstructured, def *corev1alpha1.CompositionDefinition) (ctrl.Result, error) {
	if err := r.addFinalizer(ctx, obj); err != nil {
		return ctrl.Result{}, err
	}
	if result, done, err := r.leaveTargets(ctx, obj, def, true); !done {
		return result, err
	}
	w, err := r.prepare(ctx, obj, def)
	if err != nil {
		return ctrl.Result{}, err
	}
	// status.fingerprint is not in the fixed status schema; the schema keeps unknown
	// status fields, so it is stored as it is. It only tells users what is installed:
	// whether to install rests on the sealed release record alone.
	installed, _, _ := unstructured.NestedString(obj.Object, "status", "fingerprint")
	a := r.installOn(ctx, obj, def, r.localSite(ctx), w)
	if a.changed || (a.ready && installed != w.fingerprint) {
		for field, value := range map[string]string{
			"helmChartUrl":     def.Status.PackageURL,
			"helmChartVersion": w.chart.Metadata.Version,
			"releaseName":      w.release,
			"digest":           w.digest,
			"fingerprint":      w.fingerprint,
		} {
			_ = unstructured.SetNestedField(obj.Object, value, "status", field)
		}
	}
	r.setConditions(obj, a.ready, a.reason, a.message)
	if !a.ready {
		return a.result()
	}
	if a.changed {
		setPruned(obj, w, a.leftBehind)
	}
	recorded := r.keepRevision(ctx, obj, def, w, a)
	r.setRepresentable(ctx, obj)
	r.setHealth(obj, a.health)
	result, err := healthRetry(a.result())(a.health)
	if !recorded && err == nil && (result.RequeueAfter == 0 || result.RequeueAfter > retryRevision) {
		result.RequeueAfter = retryRevision
	}
	return result, err
}

// retryRevision is how soon a composition whose revision could not be recorded is
// looked at again.
const retryRevision = 30 * time.Second

// keepRevision records the revision a installed as a CompositionRevision (revisions.go)
// unless status.revision says it is recorded already, and says whether it is. The
// install stands either way: a record that cannot be written is reported, and tried
// again.
func (r *Reconciler) keepRevision(ctx context.Context, obj *unstructured.Unstructured, def *corev1alpha1.CompositionDefinition, w work, a attempt) bool {
	if a.revision <= 0 || (!a.changed && recordedRevision(obj) == int64(a.revision)) {
		return true
	}
	if err := r.recordRevision(ctx, obj, def, w, a.revision); err != nil {
		r.eventf(obj, nil, corev1.EventTypeWarning, EventRevisionNotRecorded, "Install", "revision %d of release %s is installed, but not recorded: %v", a.revision, w.release, err)
		return false
	}
	_ = unstructured.SetNestedField(obj.Object, int64(a.revision), "status", "revision")
	return true
}

// remove uninstalls the composition's releases, on the target clusters it was placed on
// and in the local cluster, then lets the composition go. A target cluster that does
// not answer holds the deletion until it does, or is no longer registered.
func (r *Reconciler) remove(ctx context.Context, obj *unstructured.Unstructured, def *corev1alpha1.CompositionDefinition) (ctrl.Result, error) {
	if !controllerutil.ContainsFinalizer(obj, vocab.CompositionFinalizer) {
		return ctrl.Result{}, nil
	}
	if result, done, err := r.leaveTargets(ctx, obj, def, true); !done {
		return result, err
	}
	if placement, err := multicluster.ParsePlacement(obj.GetAnnotations()); err != nil || placement.Local() || hasLocalRelease(obj) {
		if a := r.uninstallOn(ctx, obj, def, r.localSite(ctx)); !a.ready {
			r.setConditions(obj, false, a.reason, a.message)
			return ctrl.Result{}, a.err
		}
	}
	// The revisions go too, as far as they can: records left behind name a UID no
	// composition has any more, and must not hold the deletion (in a namespace being
	// deleted, the release role may be gone already).
	if err := r.deleteRevisions(ctx, obj); err != nil {
		r.eventf(obj, nil, corev1.EventTypeWarning, EventRevisionsNotDeleted, "Delete", "the composition's CompositionRevisions were not all deleted: %v", err)
	}
	controllerutil.RemoveFinalizer(obj, vocab.CompositionFinalizer)
	return ctrl.Result{}, client.IgnoreNotFound(r.Client.Update(ctx, obj))
}

// ConditionPruned tells whether the last install or upgrade left no object of an
// earlier revision behind (installGate.leftBehind): False lists those it did.
const ConditionPruned = "Pruned"

// Reasons of ConditionPruned.
const (
	ReasonPruned            = "Pruned"
	ReasonObjectsLeftBehind = "ObjectsLeftBehind"
)

func setPruned(obj *unstructured.Unstructured, w work, leftBehind []string) {
	c := metav1.Condition{Type: ConditionPruned, Status: metav1.ConditionTrue, Reason: ReasonPruned,
		Message: "the release has no object of an earlier revision it no longer renders", ObservedGeneration: obj.GetGeneration()}
	if len(leftBehind) > 0 {
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, ReasonObjectsLeftBehind, leftBehindMessage(w, leftBehind)
	}
	setCondition(obj, c)
}
