// Health beside installation: Ready says a composition's release is installed; Healthy
// says whether the objects of that release are ready, as kstatus reads them (a
// Deployment's rollout done, a Job complete, a generic object's Ready condition), and
// names the first one that is not, and why. Compositor does not wait on Helm for this
// (Helm waits for hooks only), so that Ready means the same with or without workload
// controllers: in `compositor dev` and envtest nothing ever rolls out, and Healthy
// says so.

package composition

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/fluxcd/cli-utils/pkg/kstatus/status"
	release "helm.sh/helm/v4/pkg/release/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/compositor-dev/compositor/multicluster"
	"github.com/compositor-dev/compositor/policies"
)

// ConditionHealthy is the condition type that tells whether the objects of a
// composition's release are ready.
const ConditionHealthy = "Healthy"

// Reasons of the Healthy condition besides kstatus's own statuses (InProgress, Failed,
// NotFound, Terminating), which name the first object that is not ready.
const (
	// ReasonCurrent: every object of the release is ready.
	ReasonCurrent = "Current"
	// ReasonNotInstalled: no release is installed to look at.
	ReasonNotInstalled = "NotInstalled"
	// ReasonHealthUnknown: the objects could not be read.
	ReasonHealthUnknown = "Unknown"
)

// health is what the objects of a release on one site say of themselves.
type health struct {
	status          metav1.ConditionStatus
	reason, message string
	// retry is when to look again: soon after a rollout began, less often as it ages.
	retry time.Duration
}

// Looking again at a release that is not healthy: a quarter of its age, between these.
const (
	minHealthRetry = 5 * time.Second
	maxHealthRetry = 5 * time.Minute
)

// healthOn reads the objects of rel on s, in the order of its manifest, and stops at the
// first one that is not ready.
func (r *Reconciler) healthOn(ctx context.Context, s site, rel *release.Release) health {
	if rel == nil {
		return health{status: metav1.ConditionUnknown, reason: ReasonNotInstalled, message: "no release is installed" + s.on()}
	}
	retry := min(max(time.Since(rel.Info.LastDeployed)/4, minHealthRetry), maxHealthRetry)
	unknown := func(err error) health {
		return health{status: metav1.ConditionUnknown, reason: ReasonHealthUnknown, retry: retry,
			message: fmt.Sprintf("the objects of release %s%s could not be read: %v", rel.Name, s.on(), err)}
	}
	objs, err := policies.ParseManifests(rel.Manifest)
	if err != nil {
		return unknown(err)
	}
	client, err := s.helm.objects()
	if err != nil {
		return unknown(err)
	}
	for _, obj := range objs {
		u := &unstructured.Unstructured{Object: obj.Object}
		gvk := u.GroupVersionKind()
		mapping, err := s.helm.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			return unknown(fmt.Errorf("%s: %w", obj.Ref(), err))
		}
		resource := client.Resource(mapping.Resource)
		var live *unstructured.Unstructured
		if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
			namespace := u.GetNamespace()
			if namespace == "" {
				namespace = rel.Namespace
			}
			live, err = resource.Namespace(namespace).Get(ctx, u.GetName(), metav1.GetOptions{})
		} else {
			live, err = resource.Get(ctx, u.GetName(), metav1.GetOptions{})
		}
		result := &status.Result{Status: status.NotFoundStatus, Message: "the object is not there"}
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return unknown(fmt.Errorf("reading %s: %w", obj.Ref(), err))
		default:
			if result, err = status.Compute(live); err != nil {
				return unknown(fmt.Errorf("reading the status of %s: %w", obj.Ref(), err))
			}
		}
		if result.Status != status.CurrentStatus {
			return health{status: metav1.ConditionFalse, reason: string(result.Status), retry: retry,
				message: fmt.Sprintf("%s of release %s%s is not ready: %s", objectName(gvk, u), rel.Name, s.on(), shortened(result.Message))}
		}
	}
	return health{status: metav1.ConditionTrue, reason: ReasonCurrent, message: fmt.Sprintf("every object of release %s%s is ready", rel.Name, s.on())}
}

// maxHealthMessage bounds what an object's status says in the condition: whoever
// writes the object's conditions writes it.
const maxHealthMessage = 256

// shortened is message cut to maxHealthMessage bytes, at a rune boundary.
func shortened(message string) string {
	if len(message) <= maxHealthMessage {
		return message
	}
	cut := maxHealthMessage
	for cut > 0 && !utf8.RuneStart(message[cut]) {
		cut--
	}
	return message[:cut] + "…"
}

// objectName names an object as kubectl does: kind.group/name.
func objectName(gvk schema.GroupVersionKind, obj metav1.Object) string {
	if gvk.Group == "" {
		return gvk.Kind + "/" + obj.GetName()
	}
	return gvk.Kind + "." + gvk.Group + "/" + obj.GetName()
}

// healthRetry has a reconcile that came to result, err look again at health that is
// not ready yet, unless it comes back sooner anyway.
func healthRetry(result ctrl.Result, err error) func(health) (ctrl.Result, error) {
	return func(h health) (ctrl.Result, error) {
		if err == nil && h.retry > 0 && (result.RequeueAfter == 0 || h.retry < result.RequeueAfter) {
			result.RequeueAfter = h.retry
		}
		return result, err
	}
}

// placedHealth is the health of a placed composition: that of the first selected
// cluster whose objects are not ready, or of them all; false when the release is
// installed on none.
func placedHealth(release string, selected []multicluster.Cluster, installs []attempt) (health, bool) {
	var healthy []string
	for i, cl := range selected {
		a := installs[i]
		if !a.ready {
			continue
		}
		if a.health.status != metav1.ConditionTrue {
			return a.health, true
		}
		healthy = append(healthy, cl.Name)
	}
	if len(healthy) == 0 {
		return health{}, false
	}
	slices.Sort(healthy)
	return health{status: metav1.ConditionTrue, reason: ReasonCurrent, message: fmt.Sprintf("every object of release %s is ready on %s", release, strings.Join(healthy, ", "))}, true
}

// setHealth writes the Healthy condition.
func (r *Reconciler) setHealth(obj *unstructured.Unstructured, h health) {
	setCondition(obj, metav1.Condition{Type: ConditionHealthy, Status: h.status, Reason: h.reason, Message: h.message, ObservedGeneration: obj.GetGeneration()})
}

// objectsClient is a client of the objects Helm applied, as Helm's identity: built on
// first use, one per Helm.
type objectsClient struct {
	once   sync.Once
	client dynamic.Interface
	err    error
}

// objects returns the client that reads the objects of h's releases.
func (h *Helm) objects() (dynamic.Interface, error) {
	if h.live == nil {
		return nil, errors.New("this Helm reads no objects")
	}
	h.live.once.Do(func() { h.live.client, h.live.err = dynamic.NewForConfig(h.config) })
	return h.live.client, h.live.err
}
