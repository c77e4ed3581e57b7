package composition

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"golang.org/x/time/rate"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/release"
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

// retryRefused is how often a composition the install gate refused is tried again.
const retryRefused = time.Minute

// retryRunaway is how often a composition whose render was stopped at the deadline is
// tried again: each try costs a deadline's CPU. A change of its spec tries at once.
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
	Helm     *Helm
	Recorder recorder.EventRecorder
	// DefinitionNamespace, when set, limits the controller to the compositions whose
	// definition lives there: each definition namespace runs its own controller.
	DefinitionNamespace string
	// Bind, when set, gives the controller's identity the right to install releases in a
	// namespace before it acts there.
	Bind func(ctx context.Context, namespace string) error
	// MaxReconcileRate is the most reconciliations per second.
	MaxReconcileRate int
	// Checker validates the values about to be installed (its Schemas, the same
	// validator as the webhook's) and judges the manifests about to be applied (its
	// Engine: the policies in force; nil Engine evaluates none). Required.
	Checker *policies.Checker
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

// Reconcile brings one composition's release in line with its spec.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	lane := policies.CompositionsLane(req.Namespace)
	leave, ok := r.enterLanes(lane)
	if !ok {
		laneFullTotal.WithLabelValues("namespace").Inc()
		return ctrl.Result{RequeueAfter: laneRetry()}, nil
	}
	defer leave()
	ctx = policies.WithLane(ctx, lane) // the renders and schema checks share the namespace's
	obj := r.NewComposition()
	if err := r.Client.Get(ctx, req.NamespacedName, obj); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if obj.GetLabels()[vocab.LabelCompositionVersion] != r.GVK.Version {
		return ctrl.Result{}, nil // another version's controller owns it now
	}
	def, err := r.definition(ctx, obj)
	if err != nil {
		return ctrl.Result{}, err
	}
	if def != nil && r.DefinitionNamespace != "" && def.Namespace != r.DefinitionNamespace {
		return ctrl.Result{}, nil // the controller of that definition's namespace owns it
	}
	if !r.leads() {
		return r.follow(ctx, obj, def)
	}
	before := obj.DeepCopy()
	var result ctrl.Result
	switch {
	case isPaused(obj) || (def != nil && isPaused(def)):
		r.setConditions(obj, false, condition.ReasonPaused, fmt.Sprintf("%s is \"true\" on the composition or its definition: nothing is reconciled, deletion included", vocab.AnnotationPaused))
	case !obj.GetDeletionTimestamp().IsZero():
		result, err = r.remove(ctx, obj, def)
	case def == nil:
		r.setConditions(obj, false, ReasonDefinitionNotFound, fmt.Sprintf("no Ready CompositionDefinition serves %s %s", r.GVK.Kind, r.GVK.GroupVersion()))
		result = ctrl.Result{RequeueAfter: waitForDefinition}
	default:
		placement, placementErr := multicluster.ParsePlacement(obj.GetAnnotations())
		switch {
		case placementErr != nil:
			r.setConditions(obj, false, ReasonPlacementInvalid, placementErr.Error())
		case placement.Local():
			result, err = r.install(ctx, obj, def)
		default:
			result, err = r.installPlaced(ctx, obj, def, placement, true)
		}
	}
	if obj.GetDeletionTimestamp().IsZero() || controllerutil.ContainsFinalizer(obj, vocab.CompositionFinalizer) {
		return r.settle(ctx, before, obj, result, err)
	}
	return result, err
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

// install runs helm upgrade --install in the local cluster unless the release already
// is what the composition asks for; see installOn.
func (r *Reconciler) install(ctx context.Context, obj *unstructured.Unstructured, def *corev1alpha1.CompositionDefinition) (ctrl.Result, error) {
	if err := r.addFinalizer(ctx, obj); err != nil {
		return ctrl.Result{}, err
	}
	// A composition placed on target clusters before is no longer: its releases there go.
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
	a := r.installOn(ctx, obj, def, site{helm: r.Helm, bind: r.Bind}, w)
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
	return a.result()
}

// work is what a composition asks to be installed, wherever it goes.
type work struct {
	chart       *chart.Chart
	digest      string
	values      map[string]interface{}
	fingerprint string
	release     string
}

// prepare loads the composition's chart and fingerprints the values; on an error the
// composition's conditions say why.
func (r *Reconciler) prepare(ctx context.Context, obj *unstructured.Unstructured, def *corev1alpha1.CompositionDefinition) (work, error) {
	ch, digest, err := r.Charts.Chart(ctx, def)
	if err != nil {
		r.setConditions(obj, false, chartstore.ReasonChartFetchFailed, err.Error())
		return work{}, err
	}
	values := spec(obj)
	fingerprint, err := Fingerprint(digest, values)
	if err != nil {
		r.setConditions(obj, false, ReasonInstallFailed, err.Error())
		return work{}, reconcile.TerminalError(err)
	}
	return work{chart: ch, digest: digest, values: values, fingerprint: fingerprint, release: releaseName(obj)}, nil
}

// site is where a composition's release is installed: the local cluster (cluster ""),
// or a target cluster it is placed on.
type site struct {
	cluster string
	helm    *Helm
	// bind, local only, gives the controller's identity its rights in a namespace.
	bind func(ctx context.Context, namespace string) error
	// related, targets only, is the cluster's kubeconfig Secret, named in events: the
	// events of one composition on two clusters are two series, not one.
	related runtime.Object
	// check, targets only, reports what the kubeconfig's identity may not do that the
	// install needs (Targets.checkRights).
	check func(ctx context.Context, w work, namespace string, clusterResources []schema.GroupResource) error
	// gone, targets only, is closed when this replica no longer engages the cluster:
	// nothing more is started there (handedOver).
	gone <-chan struct{}
	// shared, targets shared among replicas only: this replica's ID, recorded on the
	// releases it installs or upgrades, and whether a replica runs still.
	shared *replicas
}

// replicas are those of Compositor sharing the target clusters.
type replicas struct {
	self  string
	alive func(ctx context.Context, id string) bool
}

// handedOver reports whether this replica no longer engages s's cluster.
func (s site) handedOver() bool {
	select {
	case <-s.gone:
		return true
	default:
		return false
	}
}

// on is " on cluster <name>" for a target, "" for the local cluster: it ends messages.
func (s site) on() string {
	if s.cluster == "" {
		return ""
	}
	return " on cluster " + s.cluster
}

// attempt is what reconciling a release on one site came to.
type attempt struct {
	ready           bool
	reason, message string
	// changed: the release was installed or upgraded, to revision.
	changed  bool
	revision int
	// requeue, when set, is when to try again without an error (a refusal, a cluster
	// that did not answer); err is retried with backoff.
	requeue time.Duration
	err     error
	// elsewhere: nothing was tried, the cluster is another replica's.
	elsewhere bool
}

func (a attempt) result() (ctrl.Result, error) {
	return ctrl.Result{RequeueAfter: a.requeue}, a.err
}

func failed(reason string, err error) attempt {
	return attempt{reason: reason, message: err.Error(), err: err}
}

// installOn runs helm upgrade --install on s unless the release there already is what
// the composition asks for (deployed, with the fingerprint its sealed release record's
// label LabelFingerprint holds: never the composition's status, which others may
// write), and only through the install gate (installgate.go): the
// release must be the composition's own, its values must pass the chart's schema, and
// the manifests Helm is about to apply must stay in the namespace and pass the policies.
// The policies judge the composition as written in Compositor's cluster, its namespace
// there included, wherever it is installed.
func (r *Reconciler) installOn(ctx context.Context, obj *unstructured.Unstructured, def *corev1alpha1.CompositionDefinition, s site, w work) attempt {
	namespace, name := obj.GetNamespace(), w.release
	clusterKinds, clusterResources := allowedClusterScoped(def, s.helm.mapper)
	if s.check != nil {
		if err := s.check(ctx, w, namespace, clusterResources); err != nil {
			if _, refused := asGateError(err); refused {
				return r.refused(obj, s, err)
			}
			return failed(ReasonInstallFailed, err)
		}
	}
	last, err := s.helm.ownedRelease(namespace, name, obj.GetUID())
	if _, refused := asGateError(err); refused {
		return r.refused(obj, s, err)
	}
	if err != nil {
		return failed(ReasonInstallFailed, fmt.Errorf("%w%s", err, s.on()))
	}
	if s.handedOver() {
		return attempt{elsewhere: true}
	}
	if a, running := stillRunning(ctx, s, last); running {
		return a
	}
	if err := r.recoverInterrupted(obj, s, last); err != nil {
		return failed(ReasonInstallFailed, err)
	}
	if last != nil && last.Info.Status == release.StatusDeployed && last.Labels[vocab.LabelFingerprint] == releaseFingerprint(w.fingerprint) {
		r.Recorder.Eventf(obj, s.related, corev1.EventTypeNormal, EventHelmSkip, "Install", "release %s%s is already chart %s with these values (revision %d)", name, s.on(), w.chart.Metadata.Version, last.Version)
		return attempt{ready: true, reason: condition.ReasonAvailable, message: fmt.Sprintf("release %s is installed%s", name, s.on()), revision: last.Version}
	}
	operation := "CREATE"
	if last != nil {
		operation = "UPDATE"
	}
	request, err := r.policyRequest(ctx, obj, def, w.chart, w.digest, operation)
	if err != nil {
		return failed(ReasonInstallFailed, err)
	}
	if err := r.validateValues(ctx, request); err != nil {
		return r.refused(obj, s, err)
	}
	if err := r.renderBounded(ctx, w, namespace, last != nil); err != nil {
		if _, refused := asGateError(err); !refused {
			return failed(ReasonInstallFailed, fmt.Errorf("%w%s", err, s.on()))
		}
		a := r.refused(obj, s, err)
		a.requeue = retryRunaway
		return a
	}
	if s.bind != nil {
		if err := s.bind(ctx, namespace); err != nil {
			return failed(ReasonBindFailed, err)
		}
	}
	gate := r.gate(ctx, namespace, request, clusterKinds, s.helm.mapper)
	if s.handedOver() {
		return attempt{elsewhere: true}
	}
	outcome, rel, err := s.helm.UpgradeInstall(ctx, namespace, name, w.chart, w.values, InstallOptions{
		Last:             last,
		Labels:           releaseLabels(obj, w, s),
		ClusterResources: clusterResources,
		Gate:             gate,
	})
	if err != nil && gate.refusal != nil {
		return r.refused(obj, s, gate.refusal)
	}
	if err != nil {
		err = fmt.Errorf("%w%s", err, s.on())
		r.Recorder.Eventf(obj, s.related, corev1.EventTypeWarning, EventHelmInstallFailed, "Install", "%s", err.Error())
		return failed(ReasonInstallFailed, err)
	}
	reason := EventHelmInstalled
	if outcome == Upgraded {
		reason = EventHelmUpgraded
	}
	r.Recorder.Eventf(obj, s.related, corev1.EventTypeNormal, reason, "Install", "release %s%s is chart %s %s, revision %d", name, s.on(), w.chart.Metadata.Name, w.chart.Metadata.Version, rel.Version)
	return attempt{ready: true, reason: condition.ReasonAvailable, message: fmt.Sprintf("release %s is installed%s", name, s.on()), changed: true, revision: rel.Version}
}

// releaseLabels are the labels of the revision about to be installed on s: whose it is,
// what it installs and, on a target shared among replicas, the replica that runs the
// operation (stillRunning).
func releaseLabels(obj client.Object, w work, s site) map[string]string {
	labels := map[string]string{vocab.LabelCompositionUID: string(obj.GetUID()), vocab.LabelFingerprint: releaseFingerprint(w.fingerprint)}
	if s.shared != nil {
		labels[vocab.LabelReplica] = s.shared.self
	}
	return labels
}

// recoverInterrupted marks the release's last revision failed when a process that
// ended in the middle of an operation left it pending, and says so in an event; the
// install that follows runs the operation again from there.
func (r *Reconciler) recoverInterrupted(obj *unstructured.Unstructured, s site, last *release.Release) error {
	stuck, err := s.helm.recoverInterrupted(obj.GetNamespace(), last)
	if err != nil || stuck == "" {
		if err != nil {
			err = fmt.Errorf("%w%s", err, s.on())
		}
		return err
	}
	r.Recorder.Eventf(obj, s.related, corev1.EventTypeWarning, EventReleaseRecovered, "Install",
		"release %s%s revision %d was left %s by an interrupted operation: marked it failed and runs the operation again", last.Name, s.on(), last.Version, stuck)
	return nil
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
		r.Recorder.Eventf(obj, nil, corev1.EventTypeWarning, EventUpdateRefused, "Install", "%s", message)
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

// refused reports a refusal of the install gate on s: a Warning event, and an attempt
// not ready with the refusal's reason. It tries again later, since a policy or the
// foreign release may change without the composition changing.
func (r *Reconciler) refused(obj *unstructured.Unstructured, s site, err error) attempt {
	gate, ok := asGateError(err)
	if !ok {
		gate = &GateError{Reason: ReasonInstallFailed, Message: err.Error()}
	}
	message := gate.Message
	if s.cluster != "" {
		message = "cluster " + s.cluster + ": " + message
	}
	r.Recorder.Eventf(obj, s.related, corev1.EventTypeWarning, gate.Reason, "Install", "%s", message)
	refusalsTotal.WithLabelValues(gate.Reason).Inc()
	return attempt{reason: gate.Reason, message: message, requeue: retryRefused}
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
		if err := r.uninstallLocal(ctx, obj, def); err != nil {
			reason := ReasonUninstallFailed
			if gate, refused := asGateError(err); refused {
				reason = gate.Reason
			}
			r.setConditions(obj, false, reason, err.Error())
			return ctrl.Result{}, err
		}
	}
	controllerutil.RemoveFinalizer(obj, vocab.CompositionFinalizer)
	return ctrl.Result{}, client.IgnoreNotFound(r.Client.Update(ctx, obj))
}

// uninstallLocal uninstalls the composition's release from the local cluster, unless
// it is not the composition's (then it is left alone, with an event).
func (r *Reconciler) uninstallLocal(ctx context.Context, obj *unstructured.Unstructured, def *corev1alpha1.CompositionDefinition) error {
	name := releaseName(obj)
	if _, err := r.Helm.ownedRelease(obj.GetNamespace(), name, obj.GetUID()); err != nil {
		if gate, refused := asGateError(err); refused && gate.Reason == ReasonReleaseConflict {
			r.Recorder.Eventf(obj, nil, corev1.EventTypeNormal, EventReleaseLeftAlone, "Uninstall", "%s", err.Error())
			return nil
		} else if refused {
			r.Recorder.Eventf(obj, nil, corev1.EventTypeWarning, gate.Reason, "Uninstall", "%s", err.Error())
			return err
		}
		// Anything else: the uninstall reads the history again, and says why it cannot.
	}
	gate, clusterResources, err := r.uninstallGate(ctx, obj, def, r.Helm.mapper)
	removed := false
	if err == nil {
		removed, err = r.Helm.Uninstall(obj.GetNamespace(), name, gate, clusterResources...)
	}
	switch {
	case err != nil && r.namespaceTerminating(ctx, obj.GetNamespace()):
		// The namespace's deletion removes the release with everything else in it,
		// and has taken away the controller's rights there already.
		r.Recorder.Eventf(obj, nil, corev1.EventTypeNormal, EventHelmUninstalled, "Uninstall",
			"release %s goes with namespace %s, which is being deleted", name, obj.GetNamespace())
	case err != nil:
		return err
	case removed:
		r.Recorder.Eventf(obj, nil, corev1.EventTypeNormal, EventHelmUninstalled, "Uninstall", "release %s is uninstalled", name)
	}
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
	var conditions []metav1.Condition
	if raw, found, _ := unstructured.NestedSlice(obj.Object, "status", "conditions"); found {
		for _, item := range raw {
			m, isMap := item.(map[string]interface{})
			if !isMap {
				continue
			}
			var c metav1.Condition
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(m, &c); err == nil {
				conditions = append(conditions, c)
			}
		}
	}
	for _, kind := range []string{corev1alpha1.ConditionReady, corev1alpha1.ConditionSynced} {
		c := condition.New(kind, ok, reason, message)
		c.ObservedGeneration = obj.GetGeneration()
		meta.SetStatusCondition(&conditions, c)
	}
	out := make([]interface{}, 0, len(conditions))
	for i := range conditions {
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&conditions[i])
		if err == nil {
			out = append(out, m)
		}
	}
	_ = unstructured.SetNestedSlice(obj.Object, out, "status", "conditions")
	_ = unstructured.SetNestedField(obj.Object, obj.GetGeneration(), "status", "observedGeneration")
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
