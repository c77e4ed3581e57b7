package composition

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	corev1alpha1 "github.com/compositor-dev/compositor/api/core/v1alpha1"
	"github.com/compositor-dev/compositor/api/vocab"
	"github.com/compositor-dev/compositor/generators/rbac"
	"github.com/compositor-dev/compositor/multicluster"
	"github.com/compositor-dev/compositor/reconciler/internal/condition"
)

// Reasons and events of placed compositions.
const (
	// ReasonPlacementInvalid: the placement annotation is not a selector (the webhook
	// refuses such writes; this is for objects that predate it).
	ReasonPlacementInvalid = "PlacementInvalid"
	// ReasonPlacementUnsupported: the controller has no target clusters (Compositor
	// runs without --multicluster, or the controller runs as a generated Deployment).
	ReasonPlacementUnsupported = "PlacementUnsupported"
	// ReasonNoClusterSelected: no registered cluster matches the placement.
	ReasonNoClusterSelected = "NoClusterSelected"
	// ReasonTargetForbidden: the identity of a target's kubeconfig lacks rights the
	// install needs; nothing was installed there.
	ReasonTargetForbidden = "TargetForbidden"
	// ReasonClusterUnavailable: a cluster's kubeconfig Secret is there, but the cluster
	// cannot be used: it is not engaged yet (its kubeconfig was just written or
	// rotated), or its Secret is refused (Clusters.Unusable says why).
	ReasonClusterUnavailable = "ClusterUnavailable"
	// ReasonInstalling: the release is about to be installed on the cluster.
	ReasonInstalling = "Installing"
	// ReasonUninstalling: a cluster the composition left still has its release.
	ReasonUninstalling = "Uninstalling"
	// EventReleaseLeftBehind: a release stays on a cluster that is no longer
	// registered, since nothing can reach it.
	EventReleaseLeftBehind = "ReleaseLeftBehind"
)

const (
	// retryTarget is how soon a cluster that cannot be used yet (not engaged) is
	// looked at again, and the first hold of one that does not answer (observe).
	retryTarget = 10 * time.Second
	// targetTimeout bounds each request to a target cluster, so that one that does
	// not answer holds a worker at most that long, once per hold.
	targetTimeout = 30 * time.Second
	// rightsFresh is how long a target's rights, once found sufficient for a chart in
	// a namespace, are not asked again.
	rightsFresh = 5 * time.Minute
)

// Targets are the target clusters compositions are placed on (package multicluster),
// with one Helm per engaged cluster, built on first use and rebuilt when the cluster is
// engaged again (its kubeconfig rotated).
type Targets struct {
	Clusters *multicluster.Clusters
	Log      logr.Logger
	// Sharded: the replicas of Compositor share the clusters (multicluster.Options.Shard),
	// each engaging its own. A registered cluster not engaged here, whose kubeconfig is
	// usable, is another replica's: that replica installs there and writes its entry of
	// status.clusters.
	Sharded bool
	// Seal seals the release records written on the target clusters.
	Seal *ReleaseSeal

	mu      sync.Mutex
	helms   map[string]targetHelm
	granted map[rightsKey]time.Time
	silent  map[string]silence
}

type targetHelm struct {
	done <-chan struct{}
	helm *Helm
}

// rightsKey is one check of a target's rights: the engagement, the chart, the namespace.
type rightsKey struct {
	cluster   string
	done      <-chan struct{}
	digest    string
	namespace string
}

// helm returns Helm acting as the identity of cl's kubeconfig.
func (t *Targets) helm(cl multicluster.Cluster) (*Helm, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if h, ok := t.helms[cl.Name]; ok && h.done == cl.Done() {
		return h.helm, nil
	}
	cfg := cl.Config()
	if cfg.Timeout == 0 {
		cfg.Timeout = targetTimeout
	}
	log := t.Log
	if log.GetSink() == nil {
		log = logr.Discard()
	}
	h, err := NewHelm(cfg, t.Seal, log.WithValues("cluster", cl.Name))
	if err != nil {
		return nil, fmt.Errorf("building Helm for cluster %s: %w", cl.Name, err)
	}
	if t.helms == nil {
		t.helms = map[string]targetHelm{}
	}
	// What was built for engagements that ended goes.
	for name, old := range t.helms {
		select {
		case <-old.done:
			delete(t.helms, name)
		default:
		}
	}
	t.helms[cl.Name] = targetHelm{done: cl.Done(), helm: h}
	return h, nil
}

// A cluster that does not answer is not asked again for a while: every composition
// placed there would otherwise hold a worker for as long as a request takes to fail.
// The hold doubles from retryTarget up to maxHold while the cluster stays silent,
// and ends when it answers or is engaged again.
const maxHold = time.Minute

type silence struct {
	done     <-chan struct{}
	failures int
	until    time.Time
	err      error
}

// held returns a failed attempt at once while cl is held for not answering.
func (t *Targets) held(cl multicluster.Cluster, reason string) (attempt, bool) {
	t.mu.Lock()
	s, ok := t.silent[cl.Name]
	t.mu.Unlock()
	if !ok || s.done != cl.Done() || !time.Now().Before(s.until) {
		return attempt{}, false
	}
	err := fmt.Errorf("the cluster did not answer (%w); it is asked again after %s", s.err, s.until.UTC().Format(time.RFC3339))
	return attempt{reason: reason, message: err.Error(), err: err, requeue: time.Until(s.until)}, true
}

// observe notes whether an attempt on cl got an answer, and when cl did not, holds it
// and has the attempt retried when the hold ends.
func (t *Targets) observe(cl multicluster.Cluster, a attempt) attempt {
	t.mu.Lock()
	defer t.mu.Unlock()
	if a.err == nil || !unanswered(a.err) {
		delete(t.silent, cl.Name)
		return a
	}
	s := t.silent[cl.Name]
	if s.done != cl.Done() {
		s = silence{done: cl.Done()}
	}
	s.failures++
	s.err = a.err
	hold := min(retryTarget<<min(s.failures-1, 10), maxHold)
	s.until = time.Now().Add(hold)
	if t.silent == nil {
		t.silent = map[string]silence{}
	}
	t.silent[cl.Name] = s
	a.requeue = hold
	return a
}

// unanswered tells the errors of a cluster that did not answer (refused or timed-out
// connections, an unreachable address, an overloaded or unavailable API server) from
// its answers.
func unanswered(err error) bool {
	var netErr net.Error
	return errors.As(err, &netErr) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, context.DeadlineExceeded) ||
		apierrors.IsServiceUnavailable(err) || apierrors.IsTimeout(err) || apierrors.IsServerTimeout(err) || apierrors.IsTooManyRequests(err)
}

// notEngaged says why a registered cluster cannot be used.
func (t *Targets) notEngaged(ctx context.Context, name string) string {
	if why := t.Clusters.Unusable(ctx, name); why != "" {
		return "the cluster cannot be used: " + why
	}
	return "the cluster's kubeconfig Secret is there, but the cluster is not engaged yet: its kubeconfig was just written or rotated"
}

// secret is the kubeconfig Secret of cluster name, as events name it.
func (t *Targets) secret(name string) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: t.Clusters.Namespace(), Name: name}}
}

// Verbs the identity of a target needs in the release namespace: Helm reads, creates,
// patches (upgrades) and deletes the objects of a release, and keeps its release
// records as Secrets there.
var (
	objectVerbs = []string{"get", "create", "patch", "delete"}
	recordVerbs = []string{"get", "list", "create", "update", "delete"}
)

// checkRights makes sure namespace exists on cl and that the identity of cl's
// kubeconfig may do there what installing w needs, asking the cluster itself
// (SelfSubjectAccessReview, per kind the chart creates and verb Helm uses). What is
// missing comes back as a GateError listing it, before anything is installed.
func (t *Targets) checkRights(ctx context.Context, cl multicluster.Cluster, h *Helm, w work, namespace string, clusterResources []schema.GroupResource) error {
	key := rightsKey{cluster: cl.Name, done: cl.Done(), digest: w.digest, namespace: namespace}
	t.mu.Lock()
	at, ok := t.granted[key]
	t.mu.Unlock()
	if ok && time.Since(at) < rightsFresh {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, targetTimeout)
	defer cancel()
	c := cl.Client()
	if err := ensureNamespace(ctx, c, cl.Name, namespace); err != nil {
		return err
	}
	types, err := rbac.ResourceTypes(w.chart, h.mapper)
	if err != nil {
		return fmt.Errorf("finding the kinds the chart creates, with cluster %s's discovery: %w", cl.Name, err)
	}
	attributes := make([]authorizationv1.ResourceAttributes, 0, len(types)*len(objectVerbs)+len(recordVerbs))
	for _, verb := range recordVerbs {
		attributes = append(attributes, authorizationv1.ResourceAttributes{Namespace: namespace, Verb: verb, Resource: "secrets"})
	}
	for _, typ := range types {
		ns := namespace
		if !typ.Namespaced {
			if !slices.Contains(clusterResources, typ.GroupResource()) {
				continue // the install gate refuses it: no right is needed
			}
			ns = ""
		}
		for _, verb := range objectVerbs {
			attributes = append(attributes, authorizationv1.ResourceAttributes{Namespace: ns, Verb: verb, Group: typ.Group, Resource: typ.Resource})
		}
	}
	var missing []string
	for _, attrs := range attributes {
		review := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &attrs}}
		if err := c.Create(ctx, review); err != nil {
			return fmt.Errorf("asking cluster %s what its kubeconfig's identity may do: %w", cl.Name, err)
		}
		if !review.Status.Allowed {
			missing = append(missing, describe(attrs))
		}
	}
	if len(missing) > 0 {
		return &GateError{Reason: ReasonTargetForbidden, Message: fmt.Sprintf(
			"nothing was installed: the identity of the kubeconfig may not %s; grant it that and the install is tried again within %s",
			strings.Join(missing, ", "), retryRefused)}
	}
	t.mu.Lock()
	if t.granted == nil {
		t.granted = map[rightsKey]time.Time{}
	}
	for k := range t.granted {
		select {
		case <-k.done:
			delete(t.granted, k)
		default:
		}
	}
	t.granted[key] = time.Now()
	t.mu.Unlock()
	return nil
}

// describe is a right as kubectl auth can-i says it: "create deployments.apps in
// namespace team".
func describe(attrs authorizationv1.ResourceAttributes) string {
	resource := schema.GroupResource{Group: attrs.Group, Resource: attrs.Resource}.String()
	if attrs.Namespace == "" {
		return attrs.Verb + " " + resource + " (cluster-wide)"
	}
	return attrs.Verb + " " + resource + " in namespace " + attrs.Namespace
}

// ensureNamespace creates namespace on a target that does not have it: the release goes
// into the namespace of the same name as the composition's. An identity that may
// neither read nor create namespaces cannot tell whether it is there: then the check
// of its rights in it, and Helm, say what is wrong.
func ensureNamespace(ctx context.Context, c client.Client, cluster, namespace string) error {
	err := c.Get(ctx, client.ObjectKey{Name: namespace}, &corev1.Namespace{})
	switch {
	case err == nil:
		return nil
	case apierrors.IsForbidden(err):
		err = c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}})
		if err == nil || apierrors.IsAlreadyExists(err) || apierrors.IsForbidden(err) {
			return nil
		}
		return fmt.Errorf("creating namespace %s on cluster %s: %w", namespace, cluster, err)
	case !apierrors.IsNotFound(err):
		return fmt.Errorf("reading namespace %s on cluster %s: %w", namespace, cluster, err)
	}
	err = c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}})
	switch {
	case err == nil, apierrors.IsAlreadyExists(err):
		return nil
	case apierrors.IsForbidden(err):
		return &GateError{Reason: ReasonTargetForbidden, Message: fmt.Sprintf(
			"nothing was installed: namespace %s does not exist there and the identity of the kubeconfig may not create it: create it, or grant create namespaces", namespace)}
	default:
		return fmt.Errorf("creating namespace %s on cluster %s: %w", namespace, cluster, err)
	}
}

// ClusterStatus is a composition's release on one target cluster: an entry of
// status.clusters.
type ClusterStatus struct {
	// Name is the cluster's: its kubeconfig Secret's.
	Name string `json:"name"`
	// Ready is true when the release there is what the composition asks for.
	Ready   bool   `json:"ready"`
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
	// ChartVersion, Fingerprint and Revision are those of the release installed
	// there, kept when a later attempt fails.
	ChartVersion string `json:"chartVersion,omitempty"`
	Fingerprint  string `json:"fingerprint,omitempty"`
	Revision     int64  `json:"revision,omitempty"`
}

// Clusters reads status.clusters of a composition, by name.
func Clusters(obj *unstructured.Unstructured) map[string]ClusterStatus {
	raw, _, _ := unstructured.NestedSlice(obj.Object, "status", "clusters")
	out := make(map[string]ClusterStatus, len(raw))
	for _, item := range raw {
		m, ok := item.(map[string]interface{})
		if !ok {
			continue
		}
		var st ClusterStatus
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(m, &st); err == nil && st.Name != "" {
			out[st.Name] = st
		}
	}
	return out
}

// clustersField is status.clusters as it is stored.
func clustersField(obj *unstructured.Unstructured) interface{} {
	field, _, _ := unstructured.NestedFieldNoCopy(obj.Object, "status", "clusters")
	return field
}

// setClusters writes status.clusters, by name; none removes the field.
func setClusters(obj *unstructured.Unstructured, clusters map[string]ClusterStatus) {
	if len(clusters) == 0 {
		unstructured.RemoveNestedField(obj.Object, "status", "clusters")
		return
	}
	list := make([]ClusterStatus, 0, len(clusters))
	for _, st := range clusters {
		list = append(list, st)
	}
	slices.SortFunc(list, func(a, b ClusterStatus) int { return cmp.Compare(a.Name, b.Name) })
	out := make([]interface{}, 0, len(list))
	for i := range list {
		if m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&list[i]); err == nil {
			out = append(out, m)
		}
	}
	_ = unstructured.SetNestedSlice(obj.Object, out, "status", "clusters")
}

// localStatusFields are what status records of the release in the local cluster.
var localStatusFields = []string{"helmChartUrl", "helmChartVersion", "releaseName", "digest", "fingerprint"}

// hasLocalRelease reports whether the composition's status records a release in the
// local cluster.
func hasLocalRelease(obj *unstructured.Unstructured) bool {
	fingerprint, _, _ := unstructured.NestedString(obj.Object, "status", "fingerprint")
	return fingerprint != ""
}

// installPlaced installs the composition's release on every engaged cluster its
// placement selects that is open to its namespace, at once, and uninstalls it from
// those it selected before and no longer does; a release in the local cluster from
// before the placement goes once a target has it. Each cluster's outcome is an entry
// of status.clusters, recorded before anything is installed there; the composition is
// Ready when every selected cluster is and none is left to uninstall. A cluster that
// does not answer is held (Targets.observe) without holding the others; other failures
// are retried with the queue's backoff.
//
// lead is false on a replica that does not lead (follow): it works only on the
// clusters engaged here, and its conditions are not written. With Targets.Sharded, a
// cluster engaged on another replica is that replica's to install on and to record:
// the leader counts it Ready when its entry is, with this fingerprint.
func (r *Reconciler) installPlaced(ctx context.Context, obj *unstructured.Unstructured, def *corev1alpha1.CompositionDefinition, placement multicluster.Placement, lead bool) (ctrl.Result, error) {
	if r.Targets == nil {
		r.setConditions(obj, false, ReasonPlacementUnsupported, fmt.Sprintf(
			"the composition is placed (%s %q), but this controller installs in its own cluster only: run Compositor with --multicluster and its controllers in process",
			vocab.AnnotationPlacement, placement))
		return ctrl.Result{}, nil
	}
	if lead {
		if err := r.addFinalizer(ctx, obj); err != nil {
			return ctrl.Result{}, err
		}
	}
	w, err := r.prepare(ctx, obj, def)
	if err != nil {
		return ctrl.Result{}, err
	}
	ns := &corev1.Namespace{}
	if err := r.Live.Get(ctx, client.ObjectKey{Name: obj.GetNamespace()}, ns); err != nil {
		err = fmt.Errorf("reading namespace %s, to know which clusters are open to it: %w", obj.GetNamespace(), err)
		r.setConditions(obj, false, ReasonInstallFailed, err.Error())
		return ctrl.Result{}, err
	}
	previous := Clusters(obj)
	selection := r.Targets.Clusters.Select(ctx, placement.Selector, ns.Labels)
	selected, waiting := selection.Engaged, selection.Waiting
	var leaving []string
	for name := range previous {
		if !slices.ContainsFunc(selected, func(cl multicluster.Cluster) bool { return cl.Name == name }) && !slices.Contains(waiting, name) {
			leaving = append(leaving, name)
		}
	}
	// A slow cluster holds the workers of the compositions placed on it: at most a
	// lane's worth; the others come back in a moment, their status as it was.
	lanes := make([]string, 0, len(selected)+len(leaving))
	for _, cl := range selected {
		lanes = append(lanes, clusterLane(cl.Name))
	}
	for _, name := range leaving {
		lanes = append(lanes, clusterLane(name))
	}
	leave, ok := r.enterLanes(lanes...)
	if !ok {
		laneFullTotal.WithLabelValues("cluster").Inc()
		return ctrl.Result{RequeueAfter: laneRetry()}, nil
	}
	defer leave()
	if err := r.recordClusters(ctx, obj, previous, selected); err != nil {
		if apierrors.IsConflict(err) { // another replica wrote first: read it again
			return ctrl.Result{RequeueAfter: conflictRetry}, nil
		}
		r.setConditions(obj, false, ReasonInstallFailed, err.Error())
		return ctrl.Result{}, err
	}
	installs := make([]attempt, len(selected))
	var wg sync.WaitGroup
	for i, cl := range selected {
		wg.Go(func() { installs[i] = r.installOnTarget(ctx, obj, def, cl, w) })
	}
	left := r.uninstallFromTargets(ctx, obj, def, leaving, lead)
	wg.Wait()

	next := map[string]ClusterStatus{}
	var elsewhere []string
	for i, cl := range selected {
		a, st := installs[i], previous[cl.Name]
		if a.elsewhere {
			// Handed over to another replica half-way: the entry is the new holder's.
			if _, recorded := previous[cl.Name]; recorded {
				next[cl.Name] = st
			}
			elsewhere = append(elsewhere, cl.Name)
			continue
		}
		st.Name, st.Ready, st.Reason, st.Message = cl.Name, a.ready, a.reason, a.message
		if a.ready {
			// What is there is what w asks for, installed now or before.
			st.ChartVersion, st.Fingerprint, st.Revision = w.chart.Metadata.Version, w.fingerprint, int64(a.revision)
		}
		next[cl.Name] = st
	}
	// A cluster registered but not engaged here keeps its entry and what is installed
	// there. Shared among replicas, a usable one is another replica's; otherwise its
	// kubeconfig was just written or rotated, or cannot be used, and the leader says so.
	for _, name := range waiting {
		st, recorded := previous[name]
		another := r.Targets.Sharded && r.Targets.Clusters.Unusable(ctx, name) == ""
		if another || !lead {
			if recorded {
				next[name] = st
			}
			if another && (!recorded || !st.Ready || st.Fingerprint != w.fingerprint) {
				elsewhere = append(elsewhere, name)
			}
			continue
		}
		message := r.Targets.notEngaged(ctx, name)
		st.Name, st.Ready, st.Reason, st.Message = name, false, ReasonClusterUnavailable, message
		next[name] = st
		installs = append(installs, attempt{reason: ReasonClusterUnavailable, message: message, requeue: retryTarget})
	}
	pending := left.pending(previous, next)
	setClusters(obj, next)
	if !lead {
		return later(append(installs, left.attempts...))
	}
	all := append(installs, left.attempts...)
	if len(elsewhere) > 0 || len(left.elsewhere) > 0 {
		// Another replica's entry that changes only its message wakes nobody
		// (PlacementProgressed): the conditions read it again in a while.
		all = append(all, attempt{requeue: elsewhereRefresh})
	}
	// A release in the local cluster from before the placement goes once the
	// composition runs somewhere else: a placement that selects nothing, or a target
	// that fails, does not take the application down.
	if hasLocalRelease(obj) && readySomewhere(next, w.fingerprint) {
		if err := r.uninstallLocal(ctx, obj, def); err != nil {
			r.setConditions(obj, false, ReasonUninstallFailed, err.Error())
			return ctrl.Result{}, err
		}
		for _, field := range localStatusFields {
			unstructured.RemoveNestedField(obj.Object, "status", field)
		}
	}
	var closed string
	if len(selection.Closed) > 0 {
		closed = fmt.Sprintf("; placement %q also matches %s, not open to namespace %s (their kubeconfig Secret's %s)",
			placement, strings.Join(selection.Closed, ", "), obj.GetNamespace(), vocab.AnnotationNamespaceSelector)
	}
	switch {
	case len(installs) == 0 && len(pending) == 0 && len(waiting) == 0:
		r.setConditions(obj, false, ReasonNoClusterSelected, fmt.Sprintf("placement %q selects no registered cluster open to namespace %s", placement, obj.GetNamespace())+closed)
	case len(pending) == 0 && len(elsewhere) == 0 && !slices.ContainsFunc(installs, func(a attempt) bool { return !a.ready }):
		r.setConditions(obj, true, condition.ReasonAvailable, fmt.Sprintf("release %s is installed on %s", w.release, strings.Join(slices.Sorted(maps.Keys(next)), ", "))+closed)
	default:
		reason, message := notReadyReason(next), notReadyMessage(next)
		if message == "" && len(elsewhere) > 0 {
			reason = ReasonInstalling
		} else if message == "" {
			reason = ReasonUninstalling
		}
		// The entries not Ready say why already.
		message = joinMessages(message,
			heldElsewhere(unlisted(next, elsewhere), "has not installed this revision of the composition there yet (or, its kubeconfig just written or rotated, no replica engages the cluster yet)"),
			heldElsewhere(unlisted(next, left.elsewhere), "has not uninstalled the release there yet"))
		r.setConditions(obj, false, reason, message+closed)
	}
	return later(all)
}

// elsewhereRefresh is how often the leader reads again the entries of clusters other
// replicas have not installed on, or uninstalled from, yet.
const elsewhereRefresh = 30 * time.Second

// heldElsewhere says, of each of the clusters, engaged on other replicas, that the
// replica holding it has not done something yet.
func heldElsewhere(clusters []string, notYet string) string {
	parts := make([]string, 0, len(clusters))
	for _, name := range clusters {
		parts = append(parts, fmt.Sprintf("cluster %s: the replica of Compositor that holds the cluster %s", name, notYet))
	}
	return strings.Join(parts, "; ")
}

// unlisted are the clusters among names that notReadyMessage(clusters) leaves out:
// those without an entry, or with one that is Ready.
func unlisted(clusters map[string]ClusterStatus, names []string) []string {
	return slices.DeleteFunc(slices.Clone(names), func(name string) bool {
		st, ok := clusters[name]
		return ok && !st.Ready
	})
}

// joinMessages joins the messages that are not empty.
func joinMessages(messages ...string) string {
	return strings.Join(slices.DeleteFunc(messages, func(m string) bool { return m == "" }), "; ")
}

// readySomewhere reports whether some cluster has the release with fingerprint.
func readySomewhere(clusters map[string]ClusterStatus, fingerprint string) bool {
	for _, st := range clusters {
		if st.Ready && st.Fingerprint == fingerprint {
			return true
		}
	}
	return false
}

// recordClusters writes an entry for each selected cluster that has none yet, before
// anything is installed there: status.clusters is the record of where the composition
// has releases, which deletion and a change of placement uninstall from, and a release
// must never exist that it does not list (a process that stops after an install and
// before the status is written).
func (r *Reconciler) recordClusters(ctx context.Context, obj *unstructured.Unstructured, previous map[string]ClusterStatus, selected []multicluster.Cluster) error {
	recorded := maps.Clone(previous)
	for _, cl := range selected {
		if _, ok := recorded[cl.Name]; !ok {
			recorded[cl.Name] = ClusterStatus{Name: cl.Name, Reason: ReasonInstalling, Message: "the release is being installed"}
		}
	}
	if len(recorded) == len(previous) {
		return nil
	}
	before := obj.DeepCopy()
	setClusters(obj, recorded)
	patched := obj.DeepCopy()
	if err := r.Client.Status().Patch(ctx, patched, r.statusPatch(before, obj)); err != nil {
		setClusters(obj, previous)
		return fmt.Errorf("nothing was installed: recording the clusters about to get the release in status.clusters: %w", err)
	}
	// The reconcile's last status patch carries the resourceVersion it read when that
	// differs from what it started from (the finalizer was just added): it must be
	// this write's, not the one before it.
	obj.SetResourceVersion(patched.GetResourceVersion())
	return nil
}

// installOnTarget is installOn for one target cluster, with its Helm and the check of
// its rights.
func (r *Reconciler) installOnTarget(ctx context.Context, obj *unstructured.Unstructured, def *corev1alpha1.CompositionDefinition, cl multicluster.Cluster, w work) attempt {
	if a, held := r.Targets.held(cl, ReasonInstallFailed); held {
		return a
	}
	h, err := r.Targets.helm(cl)
	if err != nil {
		return failed(ReasonInstallFailed, err)
	}
	s := site{cluster: cl.Name, helm: h, related: r.Targets.secret(cl.Name), gone: cl.Done(), check: func(ctx context.Context, w work, namespace string, clusterResources []schema.GroupResource) error {
		return r.Targets.checkRights(ctx, cl, h, w, namespace, clusterResources)
	}}
	s.shared = r.Targets.replicas()
	return r.Targets.observe(cl, r.installOn(ctx, obj, def, s, w))
}

// replicas are those sharing the clusters, nil when they are not shared.
func (t *Targets) replicas() *replicas {
	if !t.Sharded {
		return nil
	}
	return &replicas{self: t.Clusters.Replica(), alive: t.Clusters.ReplicaAlive}
}

// departures is what uninstalling from clusters came to: the attempts, the clusters
// whose release could not be uninstalled yet, and those another replica holds.
type departures struct {
	attempts  []attempt
	failed    map[string]attempt
	elsewhere []string
}

// pending adds to next an entry for each cluster still to uninstall from (its previous
// entry, not Ready, saying why; as it is, for one another replica holds, whose entry is
// that replica's to write) and returns their names.
func (d departures) pending(previous, next map[string]ClusterStatus) []string {
	var out []string
	for name, a := range d.failed {
		st := previous[name]
		st.Name, st.Ready, st.Reason, st.Message = name, false, ReasonUninstalling, "the release there is still to uninstall: "+a.message
		next[name] = st
		out = append(out, name)
	}
	for _, name := range d.elsewhere {
		next[name] = previous[name]
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}

// uninstallFromTargets uninstalls the composition's release from the named clusters,
// at once. lead is whether this replica leads (uninstallFromTarget).
func (r *Reconciler) uninstallFromTargets(ctx context.Context, obj *unstructured.Unstructured, def *corev1alpha1.CompositionDefinition, clusters []string, lead bool) departures {
	attempts := make([]attempt, len(clusters))
	var wg sync.WaitGroup
	for i, name := range clusters {
		wg.Go(func() { attempts[i] = r.uninstallFromTarget(ctx, obj, def, name, lead) })
	}
	wg.Wait()
	d := departures{attempts: attempts, failed: map[string]attempt{}}
	for i, a := range attempts {
		switch {
		case a.elsewhere:
			d.elsewhere = append(d.elsewhere, clusters[i])
		case !a.ready:
			d.failed[clusters[i]] = a
		}
	}
	return d
}

// uninstallFromTarget uninstalls the composition's release from one cluster. A
// cluster no longer registered cannot be reached: its release is left behind, with an
// event saying so (by the leader), and the attempt succeeds. A release there that is
// not the composition's is left alone. A cluster registered and usable but engaged on
// another replica (Targets.Sharded), or any this replica does not engage when it does
// not lead, is left to the replica that holds it.
func (r *Reconciler) uninstallFromTarget(ctx context.Context, obj *unstructured.Unstructured, def *corev1alpha1.CompositionDefinition, cluster string, lead bool) attempt {
	namespace, name := obj.GetNamespace(), releaseName(obj)
	cl, ok := r.Targets.Clusters.Get(ctx, cluster)
	switch {
	case ok:
	case !r.Targets.Clusters.Registered(ctx, cluster):
		if !lead {
			return attempt{elsewhere: true}
		}
		r.Recorder.Eventf(obj, r.Targets.secret(cluster), corev1.EventTypeWarning, EventReleaseLeftBehind, "Uninstall",
			"release %s/%s is left on cluster %s: the cluster is no longer registered (its kubeconfig Secret is gone), so nothing can uninstall it", namespace, name, cluster)
		return attempt{ready: true}
	case !lead, r.Targets.Sharded && r.Targets.Clusters.Unusable(ctx, cluster) == "":
		return attempt{elsewhere: true}
	default:
		return attempt{reason: ReasonClusterUnavailable, message: r.Targets.notEngaged(ctx, cluster), requeue: retryTarget}
	}
	if a, held := r.Targets.held(cl, ReasonUninstallFailed); held {
		return a
	}
	return r.Targets.observe(cl, r.uninstallWith(ctx, obj, def, cl))
}

// uninstallWith uninstalls the composition's release from the engaged cluster cl.
func (r *Reconciler) uninstallWith(ctx context.Context, obj *unstructured.Unstructured, def *corev1alpha1.CompositionDefinition, cl multicluster.Cluster) attempt {
	namespace, name, cluster := obj.GetNamespace(), releaseName(obj), cl.Name
	h, err := r.Targets.helm(cl)
	if err != nil {
		return failed(ReasonUninstallFailed, err)
	}
	last, err := h.ownedRelease(namespace, name, obj.GetUID())
	if gate, refused := asGateError(err); refused && gate.Reason == ReasonReleaseConflict {
		r.Recorder.Eventf(obj, r.Targets.secret(cluster), corev1.EventTypeNormal, EventReleaseLeftAlone, "Uninstall", "cluster %s: %s", cluster, err.Error())
		return attempt{ready: true}
	}
	if err != nil {
		return failed(ReasonUninstallFailed, fmt.Errorf("%w on cluster %s", err, cluster))
	}
	gate, clusterResources, err := r.uninstallGate(ctx, obj, def, h.mapper)
	if err != nil {
		return failed(ReasonUninstallFailed, err)
	}
	if cl.Ended() { // another replica may hold the cluster now
		return attempt{elsewhere: true}
	}
	if a, running := stillRunning(ctx, site{cluster: cluster, shared: r.Targets.replicas()}, last); running {
		return a // what it installs would be left with no release to uninstall
	}
	removed, err := h.Uninstall(namespace, name, gate, clusterResources...)
	if err != nil {
		return failed(ReasonUninstallFailed, fmt.Errorf("%w on cluster %s", err, cluster))
	}
	if removed {
		r.Recorder.Eventf(obj, r.Targets.secret(cluster), corev1.EventTypeNormal, EventHelmUninstalled, "Uninstall", "release %s is uninstalled from cluster %s", name, cluster)
	}
	return attempt{ready: true}
}

// leaveTargets uninstalls the composition's release from every cluster status.clusters
// lists: the composition is no longer placed, or is being deleted. done is false while
// some cluster still has it; the conditions and status.clusters then say which and
// why. Without Targets nothing can reach those clusters: each release is left behind,
// with an event. lead is whether this replica leads (uninstallFromTarget).
func (r *Reconciler) leaveTargets(ctx context.Context, obj *unstructured.Unstructured, def *corev1alpha1.CompositionDefinition, lead bool) (ctrl.Result, bool, error) {
	previous := Clusters(obj)
	if len(previous) == 0 {
		return ctrl.Result{}, true, nil
	}
	if r.Targets == nil {
		for name := range previous {
			r.Recorder.Eventf(obj, nil, corev1.EventTypeWarning, EventReleaseLeftBehind, "Uninstall",
				"release %s/%s is left on cluster %s: this controller runs without target clusters (--multicluster)", obj.GetNamespace(), releaseName(obj), name)
		}
		setClusters(obj, nil)
		return ctrl.Result{}, true, nil
	}
	clusters := slices.Sorted(maps.Keys(previous))
	lanes := make([]string, len(clusters))
	for i, name := range clusters {
		lanes[i] = clusterLane(name)
	}
	leave, ok := r.enterLanes(lanes...)
	if !ok {
		laneFullTotal.WithLabelValues("cluster").Inc()
		return ctrl.Result{RequeueAfter: laneRetry()}, false, nil
	}
	defer leave()
	left := r.uninstallFromTargets(ctx, obj, def, clusters, lead)
	next := map[string]ClusterStatus{}
	if pending := left.pending(previous, next); len(pending) > 0 {
		setClusters(obj, next)
		r.setConditions(obj, false, ReasonUninstalling, joinMessages(notReadyMessage(next),
			heldElsewhere(unlisted(next, left.elsewhere), "has not uninstalled the release there yet")))
		attempts := left.attempts
		if lead && len(left.elsewhere) > 0 {
			attempts = append(attempts, attempt{requeue: elsewhereRefresh})
		}
		result, err := later(attempts)
		return result, false, err
	}
	setClusters(obj, nil)
	return ctrl.Result{}, true, nil
}

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
		result, err = r.installPlaced(ctx, obj, def, placement, false)
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

// notReadyReason is the reason of the first cluster, by name, that is not Ready.
func notReadyReason(clusters map[string]ClusterStatus) string {
	for _, name := range slices.Sorted(maps.Keys(clusters)) {
		if st := clusters[name]; !st.Ready {
			return st.Reason
		}
	}
	return ReasonInstallFailed
}

// notReadyMessage names every cluster that is not Ready, and why.
func notReadyMessage(clusters map[string]ClusterStatus) string {
	var parts []string
	for _, name := range slices.Sorted(maps.Keys(clusters)) {
		if st := clusters[name]; !st.Ready {
			message := strings.TrimPrefix(st.Message, "cluster "+name+": ")
			parts = append(parts, fmt.Sprintf("cluster %s: %s", name, message))
		}
	}
	return strings.Join(parts, "; ")
}

// later is when to reconcile again after attempts on several clusters: with the
// queue's backoff when one failed, else the soonest requeue any asks for (a refusal,
// a cluster that does not answer).
func later(attempts []attempt) (ctrl.Result, error) {
	var after time.Duration
	var errs []error
	for _, a := range attempts {
		if a.err != nil && a.requeue == 0 {
			errs = append(errs, a.err)
			continue
		}
		if d := a.requeue; d > 0 && (after == 0 || d < after) {
			after = d
		}
	}
	if len(errs) > 0 {
		// The queue's backoff: a failure that is not a cluster not answering (a chart
		// that does not install there, say) is not tried every few seconds forever.
		return ctrl.Result{}, errors.Join(errs...)
	}
	return ctrl.Result{RequeueAfter: after}, nil
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

// whereReleasesAre is status.clusters without the messages.
func whereReleasesAre(obj *unstructured.Unstructured) map[string]ClusterStatus {
	clusters := Clusters(obj)
	for name, st := range clusters {
		st.Message = ""
		clusters[name] = st
	}
	return clusters
}
