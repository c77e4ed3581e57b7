package webhooks

import (
	"context"
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	corev1alpha1 "github.com/compositor-dev/compositor/api/core/v1alpha1"
	"github.com/compositor-dev/compositor/api/vocab"
	"github.com/compositor-dev/compositor/internal/fairshare"
	"github.com/compositor-dev/compositor/policies"
)

// Reasons of compositor_admission_refusals_total besides the limits of policies.Limits
// (depth, keys, string, rendered).
const (
	// RefusedFairness: the namespace's lane was full until the deadline.
	RefusedFairness = "fairness"
	// RefusedDeadline: the schema check, the rendering or a policy ran out of time.
	RefusedDeadline = "deadline"
	// RefusedRange: a policy asked numbers.range for more than --policy-max-range.
	RefusedRange = "range"
)

// DefaultLaneConcurrency is the default number of admission evaluations one lane (the
// compositions of one namespace, its definitions, the policies) may run at once: half
// the CPUs, at least one, so that one namespace's writes can never hold every core nor
// every slot of the schema checks and renders, which the process shares.
func DefaultLaneConcurrency() int { return max(1, runtime.GOMAXPROCS(0)/2) }

// FlagLaneConcurrency names the lane bound in messages.
const FlagLaneConcurrency = "--admission-namespace-concurrency"

// boundObject refuses req's object when it passes a limit, before anything expensive
// runs; ok is false then and resp is the refusal, counted by reason. The object of a
// deletion, and of an update that only finishes one (see leaving), is not measured:
// refusing those would strand an object stored before the limits were lowered.
func boundObject(limits policies.Limits, req *Request) (resp admission.Response, ok bool) {
	if req.Object == nil || limits == (policies.Limits{}) || leaving(req) {
		return admission.Response{}, true
	}
	errs := limits.CheckObject(req.Object.Object)
	if len(errs) == 0 {
		return admission.Response{}, true
	}
	lines := make([]string, 0, len(errs))
	causes := make([]metav1.StatusCause, 0, len(errs))
	for _, e := range errs {
		refusalsTotal.WithLabelValues(e.Reason).Inc()
		lines = append(lines, e.Error())
		causes = append(causes, metav1.StatusCause{Type: metav1.CauseTypeFieldValueInvalid, Field: e.Field, Message: strings.TrimPrefix(e.Error(), e.Field+": ")})
	}
	return admission.Response{AdmissionResponse: admissionv1.AdmissionResponse{
		Allowed: false,
		Result: &metav1.Status{
			Status:  metav1.StatusFailure,
			Code:    http.StatusUnprocessableEntity,
			Reason:  metav1.StatusReasonInvalid,
			Message: strings.Join(lines, "\n"),
			Details: &metav1.StatusDetails{Group: req.Kind.Group, Kind: req.Kind.Kind, Name: req.Name, Causes: causes},
		},
	}}, false
}

// newLanes shares the admission evaluations between namespaces: each lane — the
// compositions of one namespace, the definitions of one namespace, the policies — runs
// at most perLane at once, and the others of that lane wait, each until the deadline.
// One namespace that writes runaways without pause thus holds perLane evaluations and
// delays its own writes only; every other lane's writes start at once.
func newLanes(perLane int) *fairshare.Lanes {
	if perLane < 1 {
		perLane = DefaultLaneConcurrency()
	}
	return fairshare.New(perLane)
}

// laneOf is the lane of req.
func laneOf(req *Request) string {
	switch req.Kind.Group {
	case vocab.CompositionGroup:
		return policies.CompositionsLane(req.Namespace)
	case corev1alpha1.GroupVersion.Group:
		return "definitions of namespace " + req.Namespace
	default:
		return "policies"
	}
}

// gated runs judge in req's lane. A request that only finishes a deletion is never
// held. A request that cannot start before the deadline is refused (429) and counted;
// one that took the whole deadline and was refused is counted as such.
func (v *Validator) gated(ctx context.Context, req *Request, judge func(context.Context) admission.Response) admission.Response {
	if v.lanes == nil || leaving(req) {
		return judge(ctx)
	}
	timeout := v.timeout()
	lane := laneOf(req)
	release, ok := v.lanes.Acquire(ctx, lane, timeout)
	if !ok {
		refusalsTotal.WithLabelValues(RefusedFairness).Inc()
		return admission.Errored(http.StatusTooManyRequests, fmt.Errorf(
			"the %s already run %d admission evaluations at once (%s), and this one could not start within %s: a namespace's writes wait for its own earlier ones; retry",
			lane, v.lanes.PerLane(), FlagLaneConcurrency, timeout))
	}
	defer release()
	start := time.Now()
	resp := judge(policies.WithLane(ctx, lane))
	if !resp.Allowed {
		countBoundsIn(resp, time.Since(start) >= timeout)
	}
	return resp
}

// countBoundsIn counts a refusal that a bound met inside the judging: the deadline
// (the whole of it was taken), the rendered output's size, a policy's range.
func countBoundsIn(resp admission.Response, tookTheDeadline bool) {
	if tookTheDeadline {
		refusalsTotal.WithLabelValues(RefusedDeadline).Inc()
	}
	if resp.Result == nil {
		return
	}
	if strings.Contains(resp.Result.Message, "("+policies.FlagMaxRenderedBytes+")") {
		refusalsTotal.WithLabelValues(policies.LimitRendered).Inc()
	}
	if strings.Contains(resp.Result.Message, "("+policies.FlagMaxRangeElements+")") {
		refusalsTotal.WithLabelValues(RefusedRange).Inc()
	}
}

// timeout is the deadline of one request's schema check and policies.
func (v *Validator) timeout() time.Duration {
	if v.decider != nil {
		return v.decider.judge.Timeout()
	}
	return policies.DefaultTimeout
}
