package definition

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"golang.org/x/time/rate"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/lru"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	corev1alpha1 "github.com/compositor-dev/compositor/api/core/v1alpha1"
	"github.com/compositor-dev/compositor/api/vocab"
	"github.com/compositor-dev/compositor/chartfetch"
	"github.com/compositor-dev/compositor/chartstore"
	"github.com/compositor-dev/compositor/chartverify"
	"github.com/compositor-dev/compositor/generators"
	"github.com/compositor-dev/compositor/generators/crd"
	"github.com/compositor-dev/compositor/internal/condition"
	"github.com/compositor-dev/compositor/internal/event"
	"github.com/compositor-dev/compositor/ownership"
	"github.com/compositor-dev/compositor/policies"
	"github.com/compositor-dev/compositor/reconciler/composition"
	"github.com/compositor-dev/compositor/reconciler/kinds"
)

// BundleSource knows the CA bundle the API server trusts the webhooks with.
type BundleSource interface {
	CABundle() []byte
}

// Reconciler turns CompositionDefinitions into served APIs: it fetches the chart,
// generates the CRD version from its schema, applies it and reports status.
type Reconciler struct {
	// Client reads through the manager's cache and writes.
	Client client.Client
	// Live reads compositions from the API server.
	Live client.Reader
	// Charts fetches the definitions' charts.
	Charts *chartstore.Source
	// Conversion locates the conversion webhook; its CABundle comes from Bundle.
	Conversion crd.ConversionWebhook
	Bundle     BundleSource
	Recorder   recorder.EventRecorder
	// Poll is how often a Ready definition is checked again for chart changes.
	Poll time.Duration
	// MaxReconcileRate is the most reconciliations per second.
	MaxReconcileRate int
	// Mapper resolves the kinds a chart creates to resources, through discovery.
	Mapper meta.RESTMapper
	// ControllerImage runs the generated controller Deployments.
	ControllerImage string
	// AllowChartNetworks are passed on to the generated controllers, which fetch the
	// same charts.
	AllowChartNetworks []netip.Prefix
	// Kinds, when set, serves each version: it binds the version's release role in the
	// namespaces of its compositions as they come and go and, when InProcess, runs the
	// composition controllers instead of the generated Deployments. Which versions it
	// serves is the reconciler's to say (see served.go).
	Kinds *kinds.Runtime
	// Judge judges, in the plan of a rollout, the compositions' values under the
	// new chart version: its schema and the policies; nil checks the schema only.
	Judge *policies.Judge
	// MasterKey is Compositor's master key (the release seal key): the plans of
	// rollouts key their digests with a key derived from it (PlanDigestKey), and a
	// rollout cannot plan without it.
	MasterKey []byte
	// Seal is the master seal: the key of each definition is derived from it and, for
	// controller Deployments, written into the definition's key Secret (sealkeys.go).
	Seal *composition.MasterSeal

	follower *follower // the following mode, where Kinds runs on every replica
	narrowed sync.Map  // "<uid> <plan hash> <view digest>" of the kept plans narrowed (narrowKeptPlan)

	cachesOnce sync.Once
	checked    *lru.Cache // conversion checks done (checkConversions)
	typesOf    *lru.Cache // chart digest → the resource types it creates (removedTypes)

	moves identityMoves // Compositor's record of the identities that move to its namespace (legacy.go)
}

// Indexes of the cache's CompositionDefinitions, so that an event of a Secret or a CRD
// finds its definitions without listing (and copying) all of them: a thousand
// definitions and the Secrets of ten thousand Helm releases make that the hot path.
const (
	// credentialsIndex is "<namespace>/<name>" of the Secrets a definition's chart
	// credentials and verification name (secretRefs): a password changed, or a key
	// taken out of a keyring, is acted on at once.
	credentialsIndex = "spec.chart.secretRefs"
	// crdIndex is the name of the CRD a definition generates.
	crdIndex = "status.crd"
)

// indexDefinitions adds credentialsIndex and crdIndex to a cache of definitions.
func indexDefinitions(ctx context.Context, indexer client.FieldIndexer) error {
	err := indexer.IndexField(ctx, &corev1alpha1.CompositionDefinition{}, credentialsIndex, func(obj client.Object) []string {
		var out []string
		for _, ref := range secretRefs(obj.(*corev1alpha1.CompositionDefinition)) {
			out = append(out, ref.Namespace+"/"+ref.Name)
		}
		return out
	})
	if err != nil {
		return err
	}
	return indexer.IndexField(ctx, &corev1alpha1.CompositionDefinition{}, crdIndex, func(obj client.Object) []string {
		if resource := obj.(*corev1alpha1.CompositionDefinition).Status.Resource; resource != "" {
			return []string{resource + "." + vocab.CompositionGroup}
		}
		return nil
	})
}

// SetupWithManager registers the reconciler, its watches and its indexes with mgr,
// and, where Kinds runs on replicas that do not lead, its following mode.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if err := indexDefinitions(context.Background(), mgr.GetFieldIndexer()); err != nil {
		return err
	}
	if err := r.setupFollower(mgr); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("compositiondefinition").
		For(&corev1alpha1.CompositionDefinition{}, builder.WithPredicates(
			predicate.Or(predicate.GenerationChangedPredicate{}, predicate.AnnotationChangedPredicate{}))).
		Owns(&appsv1.Deployment{}).
		// Controller Deployments in Compositor's namespace carry no owner reference to a
		// definition of another namespace: their identity labels name it.
		Watches(&appsv1.Deployment{}, handler.EnqueueRequestsFromMapFunc(r.definitionsOfController)).
		// A generated CRD changed by hand is put back; a Secret with chart credentials
		// that changes makes its definitions fetch again. Secrets are watched by their
		// metadata only: Compositor never caches their contents.
		Watches(&apiextensionsv1.CustomResourceDefinition{}, handler.EnqueueRequestsFromMapFunc(r.definitionsOfCRD)).
		WatchesMetadata(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(r.definitionsOfSecret)).
		WithOptions(controller.Options{
			RateLimiter: workqueue.NewTypedMaxOfRateLimiter(
				workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](time.Second, 5*time.Minute),
				&workqueue.TypedBucketRateLimiter[reconcile.Request]{Limiter: rate.NewLimiter(rate.Limit(max(r.MaxReconcileRate, 1)), max(r.MaxReconcileRate, 1)*10)},
			),
		}).
		Complete(r)
}

// Reconcile brings one CompositionDefinition's generated API in line with its spec.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	def := &corev1alpha1.CompositionDefinition{}
	if err := r.Client.Get(ctx, req.NamespacedName, def); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	before := def.DeepCopy()
	// Whatever the definition's state, before anything can fail: the identities its
	// versions had in its namespace lose what a tenant there could use.
	syncing := def.Annotations[vocab.AnnotationPaused] != "true" && def.DeletionTimestamp.IsZero()
	legacyErr := r.sweepLegacyIdentities(ctx, def, syncing)
	var result ctrl.Result
	var err error
	switch {
	case def.Annotations[vocab.AnnotationPaused] == "true":
		r.pause(def)
	case !def.DeletionTimestamp.IsZero():
		result, err = r.finalize(ctx, def)
	default:
		result, err = r.sync(ctx, def)
		if failedToSync(err) {
			// A definition that does not sync hands over nothing.
			legacyErr = errors.Join(legacyErr, r.sweepLegacyIdentities(ctx, def, false))
		} else if err == nil {
			legacyErr = errors.Join(legacyErr, r.endRemovedMoves(ctx, def))
		}
	}
	if legacyErr != nil {
		err = errors.Join(err, legacyErr)
	}
	r.recordEvents(before, def)
	if patchErr := r.patchStatus(ctx, before, def); patchErr != nil {
		err = errors.Join(err, patchErr)
	}
	return result, err
}

// recordEvents emits an event when the Synced condition changed: only when something
// happened, never once per reconciliation.
func (r *Reconciler) recordEvents(before, after *corev1alpha1.CompositionDefinition) {
	if r.Recorder == nil {
		return
	}
	was := meta.FindStatusCondition(before.Status.Conditions, corev1alpha1.ConditionSynced)
	now := meta.FindStatusCondition(after.Status.Conditions, corev1alpha1.ConditionSynced)
	if now == nil || (was != nil && was.Status == now.Status && was.Reason == now.Reason && was.ObservedGeneration == now.ObservedGeneration) {
		return
	}
	eventType := corev1.EventTypeNormal
	if now.Status != metav1.ConditionTrue {
		eventType = corev1.EventTypeWarning
	}
	// The condition's message may be long (a chart's errors): the event keeps what fits.
	r.Recorder.Eventf(after, nil, eventType, now.Reason, "Reconcile", "%s", event.Note(now.Message))
}

// pause touches nothing but the status, which says that the definition is paused.
func (r *Reconciler) pause(def *corev1alpha1.CompositionDefinition) {
	failed(def, condition.ReasonPaused, fmt.Sprintf("%s is \"true\": nothing is reconciled until it is removed or \"false\"", vocab.AnnotationPaused))
}

// sync is the life of a definition: chart → schema → CRD version → status.
func (r *Reconciler) sync(ctx context.Context, def *corev1alpha1.CompositionDefinition) (ctrl.Result, error) {
	if controllerutil.AddFinalizer(def, vocab.DefinitionFinalizer) {
		if err := r.Client.Update(ctx, def); err != nil {
			return ctrl.Result{}, err
		}
	}
	chart, err := r.Charts.Fetch(ctx, def)
	var outage error
	var verified *chartverify.Identity
	if err == nil {
		// Nothing of a chart is used before its signature checks.
		if verified, err = r.Charts.Verify(ctx, def, chart); err != nil {
			return r.refuseUnverified(def, chart.Digest, err)
		}
	} else {
		if chart, outage = r.keptChart(ctx, def, err); chart == nil {
			return r.fail(def, outage)
		}
		if err := keptVerified(def, chart); err != nil {
			return r.fail(def, errors.Join(err, outage))
		}
	}
	keepErr := r.Charts.Keep(ctx, chart)
	api, err := r.describeAPI(def, chart)
	if err != nil {
		return r.fail(def, err)
	}
	if err := r.claimAPI(ctx, def, api, chart); err != nil {
		return r.fail(def, err)
	}
	claimed, err := r.applyCRD(ctx, api, previousVersion(def))
	if err != nil {
		return r.fail(def, err)
	}
	archiveErr, err := r.applyWorkloads(ctx, def, chart.Chart, chart.Digest, api)
	if err != nil {
		return r.fail(def, err)
	}
	previous, previousResource := previousVersion(def), def.Status.Resource
	if err := r.publishStatus(ctx, def, chart, api, claimed, verified); err != nil {
		return r.fail(def, err)
	}
	next, err := r.advanceRollout(ctx, def, api, chart)
	if err != nil {
		return r.fail(def, err)
	}
	if err := r.pruneVersions(ctx, def, api, claimed); err != nil {
		return r.fail(def, err)
	}
	if previous != "" && previous != api.Version && !retains(def, previous) {
		if err := r.deleteWorkloads(ctx, def, previousResource, previous); err != nil {
			return r.fail(def, err)
		}
	}
	if outage != nil {
		return r.fail(def, outage)
	}
	noteNotKept(def, chart, keepErr)
	noteArchiveNotReadable(def, api, archiveErr)
	if err := r.pruneCharts(ctx, def); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Deleting chart archives no definition records")
	}
	after := r.Poll
	if next > 0 && (after == 0 || next < after) {
		after = next
	}
	return ctrl.Result{RequeueAfter: after}, nil
}

// ReasonAPIOwnedElsewhere: another definition serves the kind and version from other
// chart content.
const ReasonAPIOwnedElsewhere = "APIOwnedElsewhere"

// claimAPI refuses to serve api from fetched when another definition already serves
// that kind and version from other chart content (see package ownership): it would
// change another team's API under its compositions. It is retried, so the definition
// serves once the owner is gone.
func (r *Reconciler) claimAPI(ctx context.Context, def *corev1alpha1.CompositionDefinition, api *generatedAPI, fetched *chartfetch.Result) error {
	// Read only, straight from the cache: every reconciliation asks.
	list := &corev1alpha1.CompositionDefinitionList{}
	if err := r.Client.List(ctx, list, client.UnsafeDisableDeepCopy); err != nil {
		return fmt.Errorf("listing CompositionDefinitions: %w", err)
	}
	content := generators.ContentDigest(fetched.Chart)
	same := func(server *corev1alpha1.CompositionDefinition) (bool, error) {
		if server.Status.Digest == fetched.Digest {
			return true, nil
		}
		ch, _, err := r.Charts.Chart(ctx, server)
		if err != nil {
			return false, fmt.Errorf("comparing with the chart of CompositionDefinition %s/%s, which serves %s %s: %w",
				server.Namespace, server.Name, api.Kind, api.APIVersion(), err)
		}
		return generators.ContentDigest(ch) == content, nil
	}
	gvk := schema.GroupVersionKind{Group: vocab.CompositionGroup, Version: api.Version, Kind: api.Kind}
	owner, err := ownership.Conflict(list.Items, def, gvk, same)
	if err != nil || owner == nil {
		return err
	}
	return &condition.Error{Reason: ReasonAPIOwnedElsewhere, Err: fmt.Errorf(
		"%s %s is served by CompositionDefinition %s/%s from other chart content (%s; this chart is %s): one kind and version has one chart. Publish this chart under another name or version, or use the same chart as %s/%s",
		api.Kind, api.APIVersion(), owner.Namespace, owner.Name, owner.Status.Digest, fetched.Digest, owner.Namespace, owner.Name)}
}

// publishStatus records the served API in the status, with the version it served
// before retained and a rollout from it when it moves on (beginRollout), and writes it
// at once when it names a new version or chart, before any composition is moved there:
// the webhooks find a composition's chart through the status, and refuse a write
// through a version no status names.
func (r *Reconciler) publishStatus(ctx context.Context, def *corev1alpha1.CompositionDefinition, fetched *chartfetch.Result, api *generatedAPI, claimed map[string]bool, verified *chartverify.Identity) error {
	before := def.DeepCopy()
	beginRollout(def, api, fetched, claimed)
	r.recordStatus(def, fetched, api)
	// With the digest, never after it: the chart store serves a chart that must be
	// verified only under a record of its check.
	recordVerification(def, verified)
	if before.Status.APIVersion == def.Status.APIVersion && before.Status.Digest == def.Status.Digest {
		return nil // written with the other changes at the end of the reconciliation
	}
	if err := r.Client.Status().Patch(ctx, def, client.MergeFrom(before)); err != nil {
		return fmt.Errorf("recording the served version %s before moving compositions to it: %w", def.Status.APIVersion, err)
	}
	return nil
}

// fail records err in the conditions. Errors that only a change of the definition can
// fix are terminal: they are not retried until the definition changes.
func (r *Reconciler) fail(def *corev1alpha1.CompositionDefinition, err error) (ctrl.Result, error) {
	var pe *condition.Error
	if !errors.As(err, &pe) {
		pe = &condition.Error{Reason: ReasonApplyFailed, Err: err}
	}
	failed(def, pe.Reason, pe.Error())
	if pe.Terminal {
		return ctrl.Result{}, reconcile.TerminalError(err)
	}
	return ctrl.Result{}, err
}

func (r *Reconciler) patchStatus(ctx context.Context, before, def *corev1alpha1.CompositionDefinition) error {
	if equalStatus(before.Status, def.Status) {
		return nil
	}
	if err := r.Client.Status().Patch(ctx, def, client.MergeFrom(before)); err != nil {
		return client.IgnoreNotFound(err)
	}
	return nil
}

func (r *Reconciler) definitionsOfSecret(ctx context.Context, secret client.Object) []reconcile.Request {
	return r.definitionsIndexed(ctx, credentialsIndex, secret.GetNamespace()+"/"+secret.GetName())
}

func (r *Reconciler) definitionsOfCRD(ctx context.Context, obj client.Object) []reconcile.Request {
	if obj.GetLabels()[vocab.LabelManaged] != "true" {
		return nil
	}
	return r.definitionsIndexed(ctx, crdIndex, obj.GetName())
}

// definitionsIndexed are the definitions whose index value is key.
func (r *Reconciler) definitionsIndexed(ctx context.Context, index, key string) []reconcile.Request {
	list := &corev1alpha1.CompositionDefinitionList{}
	if err := r.Client.List(ctx, list, client.MatchingFields{index: key}, client.UnsafeDisableDeepCopy); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Listing CompositionDefinitions to map an event", "index", index)
		return nil
	}
	requests := make([]reconcile.Request, 0, len(list.Items))
	for i := range list.Items {
		requests = append(requests, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: list.Items[i].Namespace, Name: list.Items[i].Name}})
	}
	return requests
}
