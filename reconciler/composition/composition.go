package composition

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	corev1alpha1 "github.com/compositor-dev/compositor/api/core/v1alpha1"
	"github.com/compositor-dev/compositor/api/vocab"
	"github.com/compositor-dev/compositor/chartstore"
	"github.com/compositor-dev/compositor/conversion"
	"github.com/compositor-dev/compositor/internal/condition"
	"github.com/compositor-dev/compositor/internal/fairshare"
	"github.com/compositor-dev/compositor/multicluster"
	"github.com/compositor-dev/compositor/ownership"
	"github.com/compositor-dev/compositor/policies"
)

// Events of the composition controller.
const (
	EventHelmInstalled     = "HelmInstalled"
	EventHelmUpgraded      = "HelmUpgraded"
	EventHelmSkip          = "HelmSkip"
	EventHelmInstallFailed = "HelmInstallFailed"
	EventHelmUninstalled   = "HelmUninstalled"
	// EventObjectsLeftBehind: an upgrade dropped objects from the release that the
	// controller could not delete.
	EventObjectsLeftBehind = "ObjectsLeftBehind"
	EventUpdateRefused     = "UpdateRefused"
	EventReleaseLeftAlone  = "ReleaseLeftAlone"
)

// Reasons of a composition's conditions.
const (
	ReasonDefinitionNotFound = "DefinitionNotFound"
	ReasonInstallFailed      = "InstallFailed"
	ReasonUninstallFailed    = "UninstallFailed"
	ReasonBindFailed         = "BindFailed"
	ReasonUpdateRefused      = "UpdateRefused"
	// ReasonRenderRefused: the chart, rendered with the composition's values, ran past
	// the deadline or past the bound of rendered bytes; nothing was installed.
	ReasonRenderRefused = "RenderRefused"
)

// waitForDefinition is how often a composition without a Ready definition looks again;
// definition changes also wake it.
const waitForDefinition = 30 * time.Second

// waitForSeal is how soon a composition whose definition's key is not available is
// tried again.
const waitForSeal = 5 * time.Second

// retryRefused is how often a composition the install gate refused is tried again.
const retryRefused = time.Minute

// retryRunaway is the longest a composition whose render was stopped at the deadline
// waits before it is tried again (runaway.go): each try costs a deadline's CPU. A
// change of its spec tries at once.
const retryRunaway = 5 * time.Minute

// Reconciler installs one Helm release per composition of one served version of a
// generated kind (docs/architecture.md#the-composition-controller).
type Reconciler struct {
	// Client reads and writes compositions and reads definitions, as the controller's
	// identity.
	Client client.Client
	// Live reads namespaces, uncached, as the controller's identity.
	Live client.Reader
	// GVK is the served version's group, version and kind.
	GVK schema.GroupVersionKind
	// Charts loads the definitions' charts.
	Charts *chartstore.Source
	// Helm acts with the same identity as Client.
	Helm *Helm
	// Keys, when set, give each composition's records the seal of its definition
	// (sealkeys.go); without them Helm's own seal seals every record.
	Keys     SealKeys
	Recorder recorder.EventRecorder
	// DefinitionNamespace, when set, limits the controller to the compositions whose
	// definition lives there: each definition namespace runs its own controller.
	DefinitionNamespace string
	// Bind, when set, gives the controller's identity the right to install releases in a
	// namespace before it acts there.
	Bind func(ctx context.Context, namespace string) error
	// MaxReconcileRate is the most reconciliations per second.
	MaxReconcileRate int
	// Judge validates the values about to be installed (with the same validator as
	// the webhook's), bounds their render (its Renderer and deadline) and judges the
	// manifests about to be applied (with the policies in force, when it has an
	// Engine). Required.
	Judge *policies.Judge
	// Targets, when set, are the clusters a composition annotated
	// compositor.dev/placement is installed on (targets.go, placement.go); without
	// them such a composition is not installed anywhere, and says so.
	Targets *Targets
	// Leads, when set, says whether this replica leads. With Targets shared among
	// replicas (Targets.Sharded), the controller runs on every replica: one that does
	// not lead only installs on, and uninstalls from, the target clusters engaged here,
	// and writes their entries of status.clusters (follow). nil leads.
	Leads func() bool
	// Lanes, when set, share the workers between namespaces and target clusters: the
	// compositions of one namespace, and the installs on (or uninstalls from) one
	// target cluster, are reconciled at most Lanes.PerLane() at once. A composition
	// whose lane is full goes back to the queue for a moment, holding no worker: one
	// namespace's runaway renders or one slow cluster delay only their own.
	Lanes *fairshare.Lanes
	// Schemas, when set, gives the schemas of the served versions, so that the
	// condition Representable says which versions cannot show the composition's values
	// (representable.go); nil leaves it out.
	Schemas conversion.SchemaSource

	// runaways backs off the compositions whose render was stopped at the deadline.
	runaways runaways
}

// laneRetry is how soon a composition whose lane was full is tried again; jitter
// spreads the retries of a crowded lane.
func laneRetry() time.Duration {
	return 250*time.Millisecond + rand.N(500*time.Millisecond)
}

// enterLanes takes a slot of each lane, or none when one is full.
func (r *Reconciler) enterLanes(lanes ...string) (release func(), ok bool) {
	if r.Lanes == nil {
		return func() {}, true
	}
	held := make([]func(), 0, len(lanes))
	release = func() {
		for _, leave := range held {
			leave()
		}
	}
	for _, lane := range lanes {
		leave, ok := r.Lanes.TryAcquire(lane)
		if !ok {
			release()
			return nil, false
		}
		held = append(held, leave)
	}
	return release, true
}

// clusterLane is the lane of the installs on, and uninstalls from, a target cluster.
func clusterLane(cluster string) string { return "releases on target cluster " + cluster }

// leads reports whether this replica does all of a composition's work (see Leads).
func (r *Reconciler) leads() bool { return r.Leads == nil || r.Leads() }

// NewComposition returns an empty object of the controller's kind.
func (r *Reconciler) NewComposition() *unstructured.Unstructured {
	obj := &unstructured.Unstructured{}
	obj.SetGroupVersionKind(r.GVK)
	return obj
}

// SetupWithManager registers the controller with mgr, whose cache should select only
// the compositions labelled with the version (CompositionCacheOptions).
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	rateLimit := max(r.MaxReconcileRate, 1)
	return ctrl.NewControllerManagedBy(mgr).
		Named(strings.ToLower(r.GVK.Kind)+"-"+r.GVK.Version).
		For(r.NewComposition(), builder.WithPredicates(
			predicate.NewPredicateFuncs(func(o client.Object) bool { return o.GetLabels()[vocab.LabelCompositionVersion] == r.GVK.Version }),
			predicate.Or[client.Object](predicate.GenerationChangedPredicate{}, predicate.AnnotationChangedPredicate{}, predicate.LabelChangedPredicate{}, DeletionStarted{}, Resynced{}))).
		Watches(&corev1alpha1.CompositionDefinition{}, handler.EnqueueRequestsFromMapFunc(r.compositionsOfDefinition)).
		WithOptions(controller.Options{
			SkipNameValidation:      ptrTo(true),
			MaxConcurrentReconciles: managerWorkers,
			RateLimiter: workqueue.NewTypedMaxOfRateLimiter(
				workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](time.Second, 5*time.Minute),
				&workqueue.TypedBucketRateLimiter[reconcile.Request]{Limiter: rate.NewLimiter(rate.Limit(rateLimit), rateLimit*10)},
			),
		}).
		Complete(r)
}

// DeletionStarted passes the update that sets an object's deletionTimestamp.
type DeletionStarted struct{ predicate.Funcs }

func (DeletionStarted) Update(e event.UpdateEvent) bool {
	return e.ObjectOld.GetDeletionTimestamp().IsZero() && !e.ObjectNew.GetDeletionTimestamp().IsZero()
}

// Resynced passes the informer's periodic replay of an unchanged object (--sync), so
// that every composition is reconciled at least that often.
type Resynced struct{ predicate.Funcs }

func (Resynced) Update(e event.UpdateEvent) bool {
	return e.ObjectOld.GetResourceVersion() == e.ObjectNew.GetResourceVersion()
}

// Reconcile brings one composition's releases in line with its spec. It takes a slot
// of the namespace's lane (its renders and schema checks share it), reads the
// composition and the definition that serves it, and then, on the leader, delivers it
// to its sites or removes it (lead); on a replica that does not lead, it does this
// replica's part on the target clusters engaged here (follow). The status the
// reconcile came to is written once, at the end (settle).
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	if r.Judge != nil && r.Judge.Engine() != nil && r.Judge.Engine().ConstraintsPending() {
		// Nothing is installed before the Gatekeeper constraints are read.
		return ctrl.Result{RequeueAfter: time.Second}, nil
	}
	lane := policies.CompositionsLane(req.Namespace)
	leave, ok := r.enterLanes(lane)
	if !ok {
		laneFullTotal.WithLabelValues("namespace").Inc()
		return ctrl.Result{RequeueAfter: laneRetry()}, nil
	}
	defer leave()
	ctx = policies.WithLane(ctx, lane)
	obj, def, err := r.load(ctx, req)
	if obj == nil || err != nil {
		if err == nil {
			r.runaways.forget(req.NamespacedName)
		}
		return ctrl.Result{}, err
	}
	seal, ours, err := r.sealOf(ctx, obj, def)
	switch {
	case !ours:
		return ctrl.Result{}, nil
	case errors.Is(err, ErrSealUnavailable):
		before := obj.DeepCopy()
		r.setConditions(obj, false, ReasonReleaseSealUnavailable, "nothing was installed or deleted: "+err.Error())
		return r.settle(ctx, before, obj, ctrl.Result{RequeueAfter: waitForSeal}, nil)
	case err != nil:
		return ctrl.Result{}, err
	}
	ctx = withSeal(ctx, seal)
	if !r.leads() {
		return r.follow(ctx, obj, def)
	}
	before := obj.DeepCopy()
	result, err := r.lead(ctx, obj, def)
	if obj.GetDeletionTimestamp().IsZero() || controllerutil.ContainsFinalizer(obj, vocab.CompositionFinalizer) {
		return r.settle(ctx, before, obj, result, err)
	}
	return result, err
}

// load reads the composition of req and the definition that serves it (nil when none
// is Ready). obj is nil when there is nothing for this controller to do: the
// composition is gone, another version's controller owns it now, or the controller
// of another definition namespace does.
func (r *Reconciler) load(ctx context.Context, req ctrl.Request) (obj *unstructured.Unstructured, def *corev1alpha1.CompositionDefinition, err error) {
	obj = r.NewComposition()
	if err := r.Client.Get(ctx, req.NamespacedName, obj); err != nil {
		return nil, nil, client.IgnoreNotFound(err)
	}
	if obj.GetLabels()[vocab.LabelCompositionVersion] != r.GVK.Version {
		return nil, nil, nil
	}
	if def, err = r.definition(ctx, obj); err != nil {
		return nil, nil, err
	}
	if def != nil && r.DefinitionNamespace != "" && def.Namespace != r.DefinitionNamespace {
		return nil, nil, nil
	}
	return obj, def, nil
}

// lead is the leader's reconcile of a composition: nothing while it or its definition
// is paused; its removal once it is being deleted; else its delivery to the local
// cluster, or to the target clusters its placement selects.
func (r *Reconciler) lead(ctx context.Context, obj *unstructured.Unstructured, def *corev1alpha1.CompositionDefinition) (ctrl.Result, error) {
	switch {
	case isPaused(obj) || (def != nil && isPaused(def)):
		r.setConditions(obj, false, condition.ReasonPaused, fmt.Sprintf("%s is \"true\" on the composition or its definition: nothing is reconciled, deletion included", vocab.AnnotationPaused))
		return ctrl.Result{}, nil
	case !obj.GetDeletionTimestamp().IsZero():
		return r.remove(ctx, obj, def)
	case def == nil:
		r.setConditions(obj, false, ReasonDefinitionNotFound, fmt.Sprintf("no Ready CompositionDefinition serves %s %s", r.GVK.Kind, r.GVK.GroupVersion()))
		return ctrl.Result{RequeueAfter: waitForDefinition}, nil
	}
	placement, err := multicluster.ParsePlacement(obj.GetAnnotations())
	switch {
	case err != nil:
		r.setConditions(obj, false, ReasonPlacementInvalid, err.Error())
		return ctrl.Result{}, nil
	case placement.Local():
		return r.deliverLocally(ctx, obj, def)
	default:
		return r.deliverPlaced(ctx, obj, def, placement, true)
	}
}

// conflictRetry is how soon a reconcile whose write met a newer object runs again.
const conflictRetry = time.Second

// settle writes the status the reconcile came to and returns what it came to. A write
// refused for a stale resourceVersion is tried again soon, and is no error: with the
// target clusters shared, another replica wrote first, and the newer object is in the
// cache within moments.
func (r *Reconciler) settle(ctx context.Context, before, obj *unstructured.Unstructured, result ctrl.Result, err error) (ctrl.Result, error) {
	patchErr := r.patchStatus(ctx, before, obj)
	switch {
	case patchErr == nil:
		return result, err
	case apierrors.IsConflict(patchErr) && err == nil:
		return ctrl.Result{RequeueAfter: conflictRetry}, nil
	default:
		return result, errors.Join(err, patchErr)
	}
}

// addFinalizer adds the composition's finalizer before anything is installed. When
// the API server refuses the update (a webhook, a quota, RBAC), the composition says
// so in its conditions: the status is patched apart from the object.
func (r *Reconciler) addFinalizer(ctx context.Context, obj *unstructured.Unstructured) error {
	if !controllerutil.AddFinalizer(obj, vocab.CompositionFinalizer) {
		return nil
	}
	withFinalizer := obj.DeepCopy()
	if err := r.Client.Update(ctx, withFinalizer); err != nil {
		controllerutil.RemoveFinalizer(obj, vocab.CompositionFinalizer)
		message := fmt.Sprintf("nothing was installed: the controller could not add its finalizer %s to the composition: %v", vocab.CompositionFinalizer, err)
		r.eventf(obj, nil, corev1.EventTypeWarning, EventUpdateRefused, "Install", "%s", message)
		r.setConditions(obj, false, ReasonUpdateRefused, message)
		return fmt.Errorf("adding the finalizer: %w", err)
	}
	// Keep the status as reconciled so far: the update returns the stored one.
	if status, found := obj.Object["status"]; found {
		withFinalizer.Object["status"] = status
	} else {
		delete(withFinalizer.Object, "status")
	}
	obj.Object = withFinalizer.Object
	return nil
}

// namespaceTerminating reports whether namespace is being deleted; false when that
// cannot be read.
func (r *Reconciler) namespaceTerminating(ctx context.Context, namespace string) bool {
	ns := &corev1.Namespace{}
	if r.Live == nil || r.Live.Get(ctx, client.ObjectKey{Name: namespace}, ns) != nil {
		return false
	}
	return ns.Status.Phase == corev1.NamespaceTerminating
}

// definition returns the CompositionDefinition that serves the controller's version
// for obj: the one in obj's namespace, else the oldest. nil when none is Ready for it.
// The client's cache has ownership's index of definitions.
func (r *Reconciler) definition(ctx context.Context, obj client.Object) (*corev1alpha1.CompositionDefinition, error) {
	list := &corev1alpha1.CompositionDefinitionList{}
	if err := r.Client.List(ctx, list, ownership.ServingVersion(r.GVK)); err != nil {
		return nil, fmt.Errorf("listing CompositionDefinitions: %w", err)
	}
	return ownership.For(list.Items, r.GVK, obj.GetNamespace()), nil
}

func (r *Reconciler) compositionsOfDefinition(ctx context.Context, obj client.Object) []reconcile.Request {
	def, ok := obj.(*corev1alpha1.CompositionDefinition)
	if !ok || def.Status.Kind != r.GVK.Kind {
		return nil
	}
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(r.GVK.GroupVersion().WithKind(r.GVK.Kind + "List"))
	if err := r.Client.List(ctx, list, client.MatchingLabels{vocab.LabelCompositionVersion: r.GVK.Version}); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Listing compositions to map a definition event")
		return nil
	}
	requests := make([]reconcile.Request, 0, len(list.Items))
	for _, item := range list.Items {
		requests = append(requests, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: item.GetNamespace(), Name: item.GetName()}})
	}
	return requests
}

// setConditions sets Ready and Synced for the composition's generation; a condition
// whose status does not change keeps its lastTransitionTime.
func (r *Reconciler) setConditions(obj *unstructured.Unstructured, ok bool, reason, message string) {
	for _, kind := range []string{corev1alpha1.ConditionReady, corev1alpha1.ConditionSynced} {
		c := condition.New(kind, ok, reason, message)
		c.ObservedGeneration = obj.GetGeneration()
		setCondition(obj, c)
	}
	_ = unstructured.SetNestedField(obj.Object, obj.GetGeneration(), "status", "observedGeneration")
}

// setCondition sets c among obj's status.conditions, as meta.SetStatusCondition does.
func setCondition(obj *unstructured.Unstructured, c metav1.Condition) {
	var conditions []metav1.Condition
	if raw, found, _ := unstructured.NestedSlice(obj.Object, "status", "conditions"); found {
		for _, item := range raw {
			m, isMap := item.(map[string]interface{})
			if !isMap {
				continue
			}
			var existing metav1.Condition
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(m, &existing); err == nil {
				conditions = append(conditions, existing)
			}
		}
	}
	meta.SetStatusCondition(&conditions, c)
	out := make([]interface{}, 0, len(conditions))
	for i := range conditions {
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&conditions[i])
		if err == nil {
			out = append(out, m)
		}
	}
	_ = unstructured.SetNestedSlice(obj.Object, out, "status", "conditions")
}

func (r *Reconciler) patchStatus(ctx context.Context, before, obj *unstructured.Unstructured) error {
	if equality.Semantic.DeepEqual(before.Object["status"], obj.Object["status"]) {
		return nil
	}
	// The status is replaced as a whole, so that a merge patch never mixes condition lists.
	patch := obj.DeepCopy()
	return client.IgnoreNotFound(r.Client.Status().Patch(ctx, patch, r.statusPatch(before, obj)))
}

// statusPatch is the patch of obj's status from before. When replicas share the
// target clusters, each writes the entries of status.clusters of its own, and a merge
// patch replaces the list as a whole: a patch that changes it holds only if obj is
// still what the reconcile last read or wrote (its resourceVersion), and a conflict is
// reconciled again, from the newer object. Any other patch carries obj's
// resourceVersion, and so holds only on it, when an earlier write of this reconcile
// (the finalizer, the entries recorded before installing) moved it.
func (r *Reconciler) statusPatch(before, obj *unstructured.Unstructured) client.Patch {
	if r.Targets == nil || !r.Targets.Sharded || equality.Semantic.DeepEqual(clustersField(before), clustersField(obj)) {
		return client.MergeFrom(before)
	}
	from := before.DeepCopy()
	from.SetResourceVersion(obj.GetResourceVersion())
	return client.MergeFromWithOptions(from, client.MergeFromWithOptimisticLock{})
}

// spec returns a copy of the composition's spec: the release values.
func spec(obj *unstructured.Unstructured) map[string]interface{} {
	values, found, err := unstructured.NestedMap(obj.Object, "spec")
	if err != nil || !found || values == nil {
		return map[string]interface{}{}
	}
	return values
}

// releaseName is the composition's release: the annotation the webhook defaults, else
// its name.
func releaseName(obj client.Object) string {
	if name := obj.GetAnnotations()[vocab.AnnotationReleaseName]; name != "" {
		return name
	}
	return obj.GetName()
}

func isPaused(obj client.Object) bool {
	return obj.GetAnnotations()[vocab.AnnotationPaused] == "true"
}

func ptrTo[T any](v T) *T { return &v }
