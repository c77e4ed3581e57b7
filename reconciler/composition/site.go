// Delivery to one site: a site is a cluster a composition's release is delivered to,
// the local cluster or a target cluster it is placed on, with the Helm that acts there.
// installOn and uninstallOn are the same on every site; what differs (the check of a
// target's rights, the bind of local rights, the replica that holds a target) is a
// field of the site. work is what is delivered, attempt what delivering came to.

package composition

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	chart "helm.sh/helm/v4/pkg/chart/v2"
	releasecommon "helm.sh/helm/v4/pkg/release/common"
	release "helm.sh/helm/v4/pkg/release/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	corev1alpha1 "github.com/compositor-dev/compositor/api/core/v1alpha1"
	"github.com/compositor-dev/compositor/api/vocab"
	"github.com/compositor-dev/compositor/chartstore"
	"github.com/compositor-dev/compositor/internal/condition"
	"github.com/compositor-dev/compositor/internal/event"
	"github.com/compositor-dev/compositor/policies"
)

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

// from is " from cluster <name>" for a target, "" for the local cluster.
func (s site) from() string {
	if s.cluster == "" {
		return ""
	}
	return " from cluster " + s.cluster
}

// clusterPrefix is "cluster <name>: " for a target, "" for the local cluster: it
// begins messages.
func (s site) clusterPrefix() string {
	if s.cluster == "" {
		return ""
	}
	return "cluster " + s.cluster + ": "
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
	// health, of a ready attempt, is what the objects of the release say (health.go).
	health health
	// leftBehind, of an upgrade, are the objects of the previous revision it could not
	// delete (installGate.leftBehind).
	leftBehind []string
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
// write), and only through the install gate (installgate.go): the release must be the
// composition's own, its values must pass the chart's schema, and the manifests Helm is
// about to apply must stay in the namespace and pass the policies. The policies judge
// the composition as written in Compositor's cluster, its namespace there included,
// wherever it is installed.
func (r *Reconciler) installOn(ctx context.Context, obj *unstructured.Unstructured, def *corev1alpha1.CompositionDefinition, s site, w work) attempt {
	scope := clusterScopeOf(def, s.helm)
	last, a, done := r.lastRevision(ctx, obj, s, w, scope)
	var installed *release.Release
	if !done {
		a, installed = r.upgrade(ctx, obj, def, s, w, scope, last)
	} else if a.ready {
		installed = last
	}
	if a.ready {
		a.health = r.healthOn(ctx, s, installed)
	}
	return a
}

// clusterScope is what the definition lets the chart install outside the namespace,
// as the site's API server names it.
type clusterScope struct {
	kinds     map[schema.GroupKind]bool
	resources []schema.GroupResource
}

func clusterScopeOf(def *corev1alpha1.CompositionDefinition, h *Helm) clusterScope {
	kinds, resources := allowedClusterScoped(def, h.mapper)
	return clusterScope{kinds: kinds, resources: resources}
}

// lastRevision reads the composition's release on s, and says when there is nothing
// to do there (done): the site's rights fall short, the release is another's, the
// site went to another replica, a replica that runs still is in the middle of an
// operation, or the release already is what w asks for. A revision an interrupted
// process left pending is marked failed first (recoverInterrupted).
func (r *Reconciler) lastRevision(ctx context.Context, obj *unstructured.Unstructured, s site, w work, scope clusterScope) (last *release.Release, a attempt, done bool) {
	if s.check != nil {
		if err := s.check(ctx, w, obj.GetNamespace(), scope.resources); err != nil {
			if _, refused := asGateError(err); refused {
				return nil, r.refused(obj, s, err), true
			}
			return nil, failed(ReasonInstallFailed, err), true
		}
	}
	last, err := s.helm.ownedRelease(obj.GetNamespace(), w.release, obj.GetUID())
	if _, refused := asGateError(err); refused {
		return nil, r.refused(obj, s, err), true
	}
	if err != nil {
		return nil, failed(ReasonInstallFailed, fmt.Errorf("%w%s", err, s.on())), true
	}
	if s.handedOver() {
		return nil, attempt{elsewhere: true}, true
	}
	if a, running := stillRunning(ctx, s, last); running {
		return nil, a, true
	}
	if err := r.recoverInterrupted(obj, s, last); err != nil {
		return nil, failed(ReasonInstallFailed, err), true
	}
	if last != nil && last.Info.Status == releasecommon.StatusDeployed && last.Labels[vocab.LabelFingerprint] == releaseFingerprint(w.fingerprint) {
		r.eventf(obj, s.related, corev1.EventTypeNormal, EventHelmSkip, "Install", "release %s%s is already chart %s with these values (revision %d)", w.release, s.on(), w.chart.Metadata.Version, last.Version)
		return last, attempt{ready: true, reason: condition.ReasonAvailable, message: fmt.Sprintf("release %s is installed%s", w.release, s.on()), revision: last.Version}, true
	}
	return last, attempt{}, false
}

// upgrade installs w on s, or upgrades last to it, through the install gate: the values
// pass the chart's schema, the chart renders with them within bounds in the sandbox
// (the one render, which Helm applies: render.go), and every object Helm hands to the
// API server passes the policies.
func (r *Reconciler) upgrade(ctx context.Context, obj *unstructured.Unstructured, def *corev1alpha1.CompositionDefinition, s site, w work, scope clusterScope, last *release.Release) (attempt, *release.Release) {
	namespace := obj.GetNamespace()
	gate, err := r.installGate(ctx, obj, def, w, last, scope.kinds, s.helm.mapper)
	if _, refused := asGateError(err); refused {
		return r.refused(obj, s, err), nil
	}
	if err != nil {
		return failed(ReasonInstallFailed, err), nil
	}
	if s.bind != nil {
		if err := s.bind(ctx, namespace); err != nil {
			return failed(ReasonBindFailed, err), nil
		}
	}
	if s.handedOver() {
		return attempt{elsewhere: true}, nil
	}
	outcome, rel, err := s.helm.UpgradeInstall(ctx, namespace, w.release, w.chart, w.values, InstallOptions{
		Last:             last,
		Labels:           releaseLabels(obj, w, s),
		ClusterResources: scope.resources,
		Gate:             gate,
		Digest:           w.digest,
	})
	if err != nil && gate.refusal != nil {
		return r.refused(obj, s, gate.refusal), nil
	}
	if refusal, refused := asGateError(err); refused && refusal.Reason == ReasonRenderRefused {
		a := r.refused(obj, s, err)
		a.requeue = r.runaways.retryAfter(obj, refusal)
		return a, nil
	}
	if errors.Is(err, policies.ErrNotStarted) {
		if refusal, wait, ok := r.runaways.standing(obj); ok {
			// This try learnt nothing: the spec's last render, stopped at the deadline,
			// still says what the composition is.
			return attempt{reason: refusal.Reason, message: s.clusterPrefix() + refusal.Message, requeue: wait}, nil
		}
	}
	r.runaways.forget(client.ObjectKeyFromObject(obj))
	if err != nil {
		err = fmt.Errorf("%w%s", err, s.on())
		r.eventf(obj, s.related, corev1.EventTypeWarning, EventHelmInstallFailed, "Install", "%s", err.Error())
		return failed(ReasonInstallFailed, err), nil
	}
	reason := EventHelmInstalled
	if outcome == Upgraded {
		reason = EventHelmUpgraded
	}
	r.eventf(obj, s.related, corev1.EventTypeNormal, reason, "Install", "release %s%s is chart %s %s, revision %d", w.release, s.on(), w.chart.Metadata.Name, w.chart.Metadata.Version, rel.Version)
	if len(gate.leftBehind) > 0 {
		r.eventf(obj, s.related, corev1.EventTypeWarning, EventObjectsLeftBehind, "Install", "%s", leftBehindMessage(w, gate.leftBehind))
	}
	return attempt{ready: true, reason: condition.ReasonAvailable, message: fmt.Sprintf("release %s is installed%s", w.release, s.on()), changed: true, revision: rel.Version, leftBehind: gate.leftBehind}, rel
}

// uninstallOn uninstalls the composition's release from s. A release there that is
// not the composition's is left alone, with an event; one a replica that runs still is
// in the middle of installing is looked at again later, since what it installs would
// be left with no release to uninstall. In the local cluster, a namespace being
// deleted takes the release with it.
func (r *Reconciler) uninstallOn(ctx context.Context, obj *unstructured.Unstructured, def *corev1alpha1.CompositionDefinition, s site) attempt {
	namespace, name := obj.GetNamespace(), releaseName(obj)
	last, err := s.helm.ownedRelease(namespace, name, obj.GetUID())
	if gate, refused := asGateError(err); refused {
		if gate.Reason == ReasonReleaseConflict {
			r.eventf(obj, s.related, corev1.EventTypeNormal, EventReleaseLeftAlone, "Uninstall", "%s%s", s.clusterPrefix(), err.Error())
			return attempt{ready: true}
		}
		r.eventf(obj, s.related, corev1.EventTypeWarning, gate.Reason, "Uninstall", "%s%s", s.clusterPrefix(), err.Error())
		return failed(gate.Reason, fmt.Errorf("%w%s", err, s.on()))
	}
	// Any other error: the uninstall reads the history again, and says why it cannot.
	gate, clusterResources, gateErr := r.uninstallGate(ctx, obj, def, s.helm.mapper)
	if gateErr != nil {
		return failed(ReasonUninstallFailed, gateErr)
	}
	if s.handedOver() { // another replica may hold the cluster now
		return attempt{elsewhere: true}
	}
	if err == nil {
		if a, running := stillRunning(ctx, s, last); running {
			return a
		}
	}
	removed, err := s.helm.Uninstall(namespace, name, gate, clusterResources...)
	switch {
	case err != nil && s.cluster == "" && r.namespaceTerminating(ctx, namespace):
		// The namespace's deletion removes the release with everything else in it,
		// and has taken away the controller's rights there already.
		r.eventf(obj, nil, corev1.EventTypeNormal, EventHelmUninstalled, "Uninstall",
			"release %s goes with namespace %s, which is being deleted", name, namespace)
	case err != nil:
		reason := ReasonUninstallFailed
		if gate, refused := asGateError(err); refused {
			reason = gate.Reason
		}
		return failed(reason, fmt.Errorf("%w%s", err, s.on()))
	case removed:
		r.eventf(obj, s.related, corev1.EventTypeNormal, EventHelmUninstalled, "Uninstall", "release %s is uninstalled%s", name, s.from())
	}
	return attempt{ready: true}
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
	r.eventf(obj, s.related, corev1.EventTypeWarning, EventReleaseRecovered, "Install",
		"release %s%s revision %d was left %s by an interrupted operation: marked it failed and runs the operation again", last.Name, s.on(), last.Version, stuck)
	return nil
}

// eventf records an event about obj as Recorder.Eventf does, its note clipped to what
// the API server accepts (event.Note): the note of a refusal lists every violation and
// an error may quote a whole manifest, and the event of a longer note would be lost.
func (r *Reconciler) eventf(obj, related runtime.Object, eventType, reason, action, format string, args ...any) {
	r.Recorder.Eventf(obj, related, eventType, reason, action, "%s", event.Note(fmt.Sprintf(format, args...)))
}

// refused reports a refusal of the install gate on s: a Warning event, and an attempt
// not ready with the refusal's reason. It tries again later, since a policy or the
// foreign release may change without the composition changing.
func (r *Reconciler) refused(obj *unstructured.Unstructured, s site, err error) attempt {
	gate, ok := asGateError(err)
	if !ok {
		gate = &GateError{Reason: ReasonInstallFailed, Message: err.Error()}
	}
	message := s.clusterPrefix() + gate.Message
	r.eventf(obj, s.related, corev1.EventTypeWarning, gate.Reason, "Install", "%s", message)
	refusalsTotal.WithLabelValues(gate.Reason).Inc()
	return attempt{reason: gate.Reason, message: message, requeue: retryRefused}
}

// leftBehindMessage says which objects an upgrade to w's chart left in the cluster.
func leftBehindMessage(w work, objects []string) string {
	return fmt.Sprintf("release %s no longer has these objects, and chart %s %s's controller could not delete them, so they stay: %s; delete them by hand",
		w.release, w.chart.Metadata.Name, w.chart.Metadata.Version, strings.Join(objects, ", "))
}
