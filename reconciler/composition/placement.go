// Placement on target clusters: a composition annotated compositor.dev/placement is
// installed on every cluster its selector picks (deliverPlaced, installOnTarget), each
// recorded in status.clusters before anything is installed there (recordClusters),
// and uninstalled from the clusters it leaves (uninstallFromTargets, leaveTargets);
// later turns the attempts on several clusters into when to reconcile again. The
// reasons and events of placed compositions are declared here. It relies on
// targets.go (the clusters, their Helm, the hold of those that do not answer),
// rights.go (the check of a target's rights) and clusterstatus.go (status.clusters);
// follow.go runs it on a replica that does not lead.

package composition

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	corev1alpha1 "github.com/compositor-dev/compositor/api/core/v1alpha1"
	"github.com/compositor-dev/compositor/api/vocab"
	"github.com/compositor-dev/compositor/internal/condition"
	"github.com/compositor-dev/compositor/multicluster"
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

// deliverPlaced installs the composition's release on every engaged cluster its
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
//
// lead is the mode the reconcile chose once (Reconcile, then follow), not r.leads()
// read again: a replica that follows may be elected while the reconcile runs, and
// the reconcile then finishes as a follower (follow writes status.clusters only), not
// half as one and half as the leader. leaveTargets and uninstallFromTargets take it
// for the same reason.
func (r *Reconciler) deliverPlaced(ctx context.Context, obj *unstructured.Unstructured, def *corev1alpha1.CompositionDefinition, placement multicluster.Placement, lead bool) (ctrl.Result, error) {
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
	plan, err := r.planPlacement(ctx, obj, placement)
	if err != nil {
		r.setConditions(obj, false, ReasonInstallFailed, err.Error())
		return ctrl.Result{}, err
	}
	// A slow cluster holds the workers of the compositions placed on it: at most a
	// lane's worth; the others come back in a moment, their status as it was.
	leave, ok := r.enterClusterLanes(append(plan.selectedNames(), plan.leaving...))
	if !ok {
		return ctrl.Result{RequeueAfter: laneRetry()}, nil
	}
	defer leave()
	if err := r.recordClusters(ctx, obj, plan.previous, plan.selected); err != nil {
		if apierrors.IsConflict(err) { // another replica wrote first: read it again
			return ctrl.Result{RequeueAfter: conflictRetry}, nil
		}
		r.setConditions(obj, false, ReasonInstallFailed, err.Error())
		return ctrl.Result{}, err
	}
	installs := make([]attempt, len(plan.selected))
	var wg sync.WaitGroup
	for i, cl := range plan.selected {
		wg.Go(func() { installs[i] = r.installOnTarget(ctx, obj, def, cl, w) })
	}
	left := r.uninstallFromTargets(ctx, obj, def, plan.leaving, lead)
	wg.Wait()

	tally := r.tallyInstalls(ctx, plan, installs, w, lead)
	pending := left.pending(plan.previous, tally.next)
	setClusters(obj, tally.next)
	all := append(tally.attempts, left.attempts...)
	if !lead {
		return later(all)
	}
	if len(tally.elsewhere) > 0 || len(left.elsewhere) > 0 {
		// Another replica's entry that changes only its message wakes nobody
		// (PlacementProgressed): the conditions read it again in a while.
		all = append(all, attempt{requeue: elsewhereRefresh})
	}
	if err := r.retireLocalRelease(ctx, obj, def, tally.next, w); err != nil {
		return ctrl.Result{}, err
	}
	r.placedConditions(obj, placement, plan, w, tally, pending, left)
	h, installed := placedHealth(w.release, plan.selected, installs)
	if !installed {
		return later(all)
	}
	r.setHealth(obj, h)
	return healthRetry(later(all))(h)
}

// retireLocalRelease uninstalls a release in the local cluster from before the
// placement once the composition runs somewhere else (next says where): a placement
// that selects nothing, or a target that fails, does not take the application down.
func (r *Reconciler) retireLocalRelease(ctx context.Context, obj *unstructured.Unstructured, def *corev1alpha1.CompositionDefinition, next map[string]ClusterStatus, w work) error {
	if !hasLocalRelease(obj) || !readySomewhere(next, w.fingerprint) {
		return nil
	}
	if a := r.uninstallOn(ctx, obj, def, r.localSite(ctx)); !a.ready {
		r.setConditions(obj, false, ReasonUninstallFailed, a.message)
		return a.err
	}
	for _, field := range localStatusFields {
		unstructured.RemoveNestedField(obj.Object, "status", field)
	}
	return nil
}

// placementPlan is where a placed composition goes: the engaged clusters its placement
// selects, those registered but not engaged here (waiting), those it selects that are
// not open to its namespace (closed), and those status.clusters lists that it no
// longer selects (leaving).
type placementPlan struct {
	previous map[string]ClusterStatus
	selected []multicluster.Cluster
	waiting  []string
	closed   []string
	leaving  []string
}

// planPlacement selects the clusters for obj's placement, as its namespace's labels
// open them.
func (r *Reconciler) planPlacement(ctx context.Context, obj *unstructured.Unstructured, placement multicluster.Placement) (placementPlan, error) {
	ns := &corev1.Namespace{}
	if err := r.Live.Get(ctx, client.ObjectKey{Name: obj.GetNamespace()}, ns); err != nil {
		return placementPlan{}, fmt.Errorf("reading namespace %s, to know which clusters are open to it: %w", obj.GetNamespace(), err)
	}
	selection := r.Targets.Clusters.Select(ctx, placement.Selector, ns.Labels)
	plan := placementPlan{previous: Clusters(obj), selected: selection.Engaged, waiting: selection.Waiting, closed: selection.Closed}
	for name := range plan.previous {
		if !slices.Contains(plan.selectedNames(), name) && !slices.Contains(plan.waiting, name) {
			plan.leaving = append(plan.leaving, name)
		}
	}
	slices.Sort(plan.leaving)
	return plan, nil
}

func (p placementPlan) selectedNames() []string {
	names := make([]string, len(p.selected))
	for i, cl := range p.selected {
		names[i] = cl.Name
	}
	return names
}

// enterClusterLanes takes a slot of the lane of each of the clusters, or none when
// one is full.
func (r *Reconciler) enterClusterLanes(clusters []string) (release func(), ok bool) {
	lanes := make([]string, len(clusters))
	for i, name := range clusters {
		lanes[i] = clusterLane(name)
	}
	release, ok = r.enterLanes(lanes...)
	if !ok {
		laneFullTotal.WithLabelValues("cluster").Inc()
	}
	return release, ok
}

// installTally is what the installs on the selected clusters came to: the next
// entries of status.clusters, the attempts (with one for each cluster that cannot be
// used yet, on the leader), and the clusters another replica has still to install on.
type installTally struct {
	next      map[string]ClusterStatus
	attempts  []attempt
	elsewhere []string
}

// tallyInstalls turns the installs on plan.selected, and the clusters plan.waiting for,
// into entries of status.clusters.
func (r *Reconciler) tallyInstalls(ctx context.Context, plan placementPlan, installs []attempt, w work, lead bool) installTally {
	t := installTally{next: map[string]ClusterStatus{}, attempts: installs}
	for i, cl := range plan.selected {
		a, st := installs[i], plan.previous[cl.Name]
		if a.elsewhere {
			// Handed over to another replica half-way: the entry is the new holder's.
			if _, recorded := plan.previous[cl.Name]; recorded {
				t.next[cl.Name] = st
			}
			t.elsewhere = append(t.elsewhere, cl.Name)
			continue
		}
		st.Name, st.Ready, st.Reason, st.Message = cl.Name, a.ready, a.reason, a.message
		if a.ready {
			// What is there is what w asks for, installed now or before.
			st.ChartVersion, st.Fingerprint, st.Revision = w.chart.Metadata.Version, w.fingerprint, int64(a.revision)
		}
		t.next[cl.Name] = st
	}
	// A cluster registered but not engaged here keeps its entry and what is installed
	// there. Shared among replicas, a usable one is another replica's; otherwise its
	// kubeconfig was just written or rotated, or cannot be used, and the leader says so.
	for _, name := range plan.waiting {
		st, recorded := plan.previous[name]
		another := r.Targets.Sharded && r.Targets.Clusters.Unusable(ctx, name) == ""
		if another || !lead {
			if recorded {
				t.next[name] = st
			}
			if another && (!recorded || !st.Ready || st.Fingerprint != w.fingerprint) {
				t.elsewhere = append(t.elsewhere, name)
			}
			continue
		}
		message := r.Targets.notEngaged(ctx, name)
		st.Name, st.Ready, st.Reason, st.Message = name, false, ReasonClusterUnavailable, message
		t.next[name] = st
		t.attempts = append(t.attempts, attempt{reason: ReasonClusterUnavailable, message: message, requeue: retryTarget})
	}
	return t
}

// placedConditions say whether a placed composition is Ready, and if not why: the
// entries not Ready say why already.
func (r *Reconciler) placedConditions(obj *unstructured.Unstructured, placement multicluster.Placement, plan placementPlan, w work, t installTally, pending []string, left departures) {
	var closed string
	if len(plan.closed) > 0 {
		closed = fmt.Sprintf("; placement %q also matches %s, not open to namespace %s (their kubeconfig Secret's %s)",
			placement, strings.Join(plan.closed, ", "), obj.GetNamespace(), vocab.AnnotationNamespaceSelector)
	}
	switch {
	case len(t.attempts) == 0 && len(pending) == 0 && len(plan.waiting) == 0:
		r.setConditions(obj, false, ReasonNoClusterSelected, fmt.Sprintf("placement %q selects no registered cluster open to namespace %s", placement, obj.GetNamespace())+closed)
	case len(pending) == 0 && len(t.elsewhere) == 0 && !slices.ContainsFunc(t.attempts, func(a attempt) bool { return !a.ready }):
		r.setConditions(obj, true, condition.ReasonAvailable, fmt.Sprintf("release %s is installed on %s", w.release, strings.Join(slices.Sorted(maps.Keys(t.next)), ", "))+closed)
	default:
		reason, message := notReadyReason(t.next), notReadyMessage(t.next)
		if message == "" && len(t.elsewhere) > 0 {
			reason = ReasonInstalling
		} else if message == "" {
			reason = ReasonUninstalling
		}
		message = joinMessages(message,
			heldElsewhere(unlisted(t.next, t.elsewhere), "has not installed this revision of the composition there yet (or, its kubeconfig just written or rotated, no replica engages the cluster yet)"),
			heldElsewhere(unlisted(t.next, left.elsewhere), "has not uninstalled the release there yet"))
		r.setConditions(obj, false, reason, message+closed)
	}
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

// joinMessages joins the messages that are not empty.
func joinMessages(messages ...string) string {
	return strings.Join(slices.DeleteFunc(messages, func(m string) bool { return m == "" }), "; ")
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

// targetSite is the engaged cluster cl, as the identity of its kubeconfig, with the
// check of that identity's rights.
func (r *Reconciler) targetSite(ctx context.Context, cl multicluster.Cluster) (site, error) {
	h, err := r.Targets.helm(cl)
	if err != nil {
		return site{}, err
	}
	h = h.Sealed(sealFrom(ctx))
	return site{
		cluster: cl.Name, helm: h, related: r.Targets.secret(cl.Name), gone: cl.Done(), shared: r.Targets.replicas(),
		check: func(ctx context.Context, w work, namespace string, clusterResources []schema.GroupResource) error {
			return r.Targets.checkRights(ctx, cl, h, w, namespace, clusterResources)
		},
	}, nil
}

// installOnTarget is installOn for one target cluster, unless it is held for not
// answering.
func (r *Reconciler) installOnTarget(ctx context.Context, obj *unstructured.Unstructured, def *corev1alpha1.CompositionDefinition, cl multicluster.Cluster, w work) attempt {
	if a, held := r.Targets.held(cl, ReasonInstallFailed); held {
		return a
	}
	s, err := r.targetSite(ctx, cl)
	if err != nil {
		return failed(ReasonInstallFailed, err)
	}
	return r.Targets.observe(cl, r.installOn(ctx, obj, def, s, w))
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
		r.eventf(obj, r.Targets.secret(cluster), corev1.EventTypeWarning, EventReleaseLeftBehind, "Uninstall",
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
	s, err := r.targetSite(ctx, cl)
	if err != nil {
		return failed(ReasonUninstallFailed, err)
	}
	return r.Targets.observe(cl, r.uninstallOn(ctx, obj, def, s))
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
			r.eventf(obj, nil, corev1.EventTypeWarning, EventReleaseLeftBehind, "Uninstall",
				"release %s/%s is left on cluster %s: this controller runs without target clusters (--multicluster)", obj.GetNamespace(), releaseName(obj), name)
		}
		setClusters(obj, nil)
		return ctrl.Result{}, true, nil
	}
	clusters := slices.Sorted(maps.Keys(previous))
	leave, ok := r.enterClusterLanes(clusters)
	if !ok {
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
