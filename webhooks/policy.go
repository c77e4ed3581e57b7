package webhooks

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	chart "helm.sh/helm/v4/pkg/chart/v2"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	corev1alpha1 "github.com/compositor-dev/compositor/api/core/v1alpha1"
	policyv1alpha1 "github.com/compositor-dev/compositor/api/policy/v1alpha1"
	"github.com/compositor-dev/compositor/api/vocab"
	"github.com/compositor-dev/compositor/conversion"
	"github.com/compositor-dev/compositor/ownership"
	"github.com/compositor-dev/compositor/policies"
)

// ChartSource gives the chart a CompositionDefinition serves and its digest.
type ChartSource interface {
	Chart(ctx context.Context, def *corev1alpha1.CompositionDefinition) (*chart.Chart, string, error)
}

// policyCheck runs the chart's JSON Schema and the Rego policies over a request.
type policyCheck struct {
	judge *policies.Judge
	// charts gives compositions their chart; nil skips the schema check.
	charts ChartSource
	// cached reads definitions and namespaces.
	cached client.Reader
	// schemas tell how a composition will be stored; nil when no CRD can be read.
	schemas conversion.SchemaSource
	// live reads what the cache has not seen yet; may be nil.
	live client.Reader
	// memo carries what /mutate learned of a request to /validate.
	memo *reviewMemo
	// capabilities are the cluster's, as the install renders with them; nil: Helm's
	// defaults.
	capabilities *policies.ClusterCapabilities
}

// breaksSchema builds the policy request for req and reports whether its values break
// its chart's schema, without the policies; false when that cannot be told (the full
// decision will say why). The request is returned for that decision, so that it is
// built once.
func (p *policyCheck) breaksSchema(ctx context.Context, req *Request) (*policies.Request, bool) {
	r, err := p.request(ctx, req, nil)
	if err != nil || r.Chart == nil {
		return nil, false
	}
	d, err := p.judge.Values(ctx, r)
	if err == nil {
		p.memo.remember(req.UID, r, pinnedVersion(req), d.Violations)
	}
	return r, err == nil && d.Reason() == metav1.StatusReasonInvalid
}

// request builds the policy request for req; what /mutate learned of it (known, may be
// nil) saves looking up the composition's namespace, definition and chart again.
func (p *policyCheck) request(ctx context.Context, req *Request, known *reviewMemoEntry) (*policies.Request, error) {
	w := policies.Write{
		Operation: string(req.Operation),
		Kind:      req.Kind,
		Resource:  req.Resource,
		Namespace: req.Namespace,
		UserInfo:  req.UserInfo,
	}
	composition := req.Kind.Group == vocab.CompositionGroup
	if req.Object != nil {
		w.Object = req.Object.Object
		if composition {
			// Judged as the controller of the version it is pinned to will read it.
			stored, err := asReadBy(ctx, p.schemas, schema.GroupVersionKind(req.Kind), w.Object, pinnedVersion(req))
			if err != nil {
				return nil, undecidable(fmt.Errorf("%s %s cannot be judged as the controller of %s will read it: %w", req.Kind.Kind, req.Name, pinnedVersion(req), err))
			}
			w.Object = stored
		}
	}
	if req.OldObject != nil {
		w.OldObject = req.OldObject.Object
	}
	if composition && p.capabilities != nil {
		// Rendered as the install of this write will render it: with the cluster's
		// capabilities. Until they are first read, they are waited for as a chart is:
		// a discovery that does not answer gets a denial that says so, not the API
		// server's deadline.
		capsCtx, cancel := context.WithTimeout(ctx, chartWait(ctx))
		caps, err := p.capabilities.Get(capsCtx)
		cancel()
		if err != nil {
			return nil, undecidable(err)
		}
		w.Capabilities = caps
	}
	if known != nil && composition {
		if r := policies.NewRequest(w); known.describe(r, pinnedVersion(req)) {
			return r, nil
		}
	}
	if req.Namespace != "" {
		labels, err := p.namespaceLabels(ctx, req.Namespace)
		if err != nil {
			return nil, undecidable(err)
		}
		w.NamespaceLabels = labels
	}
	if composition {
		if err := p.describeComposition(ctx, req, &w); err != nil {
			return nil, err
		}
	}
	return policies.NewRequest(w), nil
}

// describeComposition adds the composition's definition and chart to w.
func (p *policyCheck) describeComposition(ctx context.Context, req *Request, w *policies.Write) error {
	def, err := cachedOwningDefinition(ctx, p.cached, req)
	if err == nil && def == nil && p.live != nil {
		// The reconciler records a new version in the status just before it moves
		// compositions there; the cache may not have seen it yet.
		def, err = owningDefinition(ctx, p.live, metav1.GroupVersionKind(pinnedKind(req)), req.Namespace)
	}
	if err != nil {
		return undecidable(err)
	}
	if def == nil {
		return p.unowned(ctx, req)
	}
	w.Definition = def
	if p.charts == nil {
		return nil
	}
	wait := chartWait(ctx)
	chartCtx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	if w.Chart, w.ChartDigest, err = p.charts.Chart(chartCtx, def); err != nil {
		cause := err
		if chartCtx.Err() != nil && ctx.Err() == nil {
			cause = fmt.Errorf("%w: no answer within %s", ErrChartUnavailable, wait)
		}
		return undecidable(fmt.Errorf("chart %s %s (digest %s) of CompositionDefinition %s/%s is not available, so %s cannot be checked against its schema: %w; retry when the chart source is reachable",
			def.Spec.Chart.Repo, def.Spec.Chart.Version, cmp.Or(def.Status.Digest, "not recorded yet"), def.Namespace, def.Name, req.Kind.Kind, cause))
	}
	return nil
}

// maxChartWait bounds how long admission waits for a composition's chart, well under
// the API server's webhook timeout, so that a chart source that does not answer gets
// a denial that says so rather than the API server's generic deadline.
const maxChartWait = 2 * time.Second

// ErrChartUnavailable means a composition's chart could not be had in time.
var ErrChartUnavailable = errors.New("the chart source did not answer in time")

// chartWait is how long admission waits for a chart: maxChartWait, or half of what is
// left of the request's deadline when that is shorter.
func chartWait(ctx context.Context) time.Duration {
	wait := maxChartWait
	if deadline, ok := ctx.Deadline(); ok {
		wait = min(wait, time.Until(deadline)/2)
	}
	return wait
}

// unowned decides on a composition whose version no definition reports serving. A kind
// that no definition generates (a CRD written by hand) has no chart to judge against.
// A generated kind does: a version of it without a definition is one being added or
// removed, and a write through it is refused rather than admitted unjudged.
func (p *policyCheck) unowned(ctx context.Context, req *Request) error {
	gk := schema.GroupKind{Group: req.Kind.Group, Kind: req.Kind.Kind}
	list := &corev1alpha1.CompositionDefinitionList{}
	if err := p.cached.List(ctx, list, ownership.ServingKind(gk), client.UnsafeDisableDeepCopy); err != nil {
		return undecidable(fmt.Errorf("listing CompositionDefinitions: %w", err))
	}
	if !ownership.Generated(list.Items, gk) {
		return nil
	}
	pinned := pinnedKind(req)
	return undecidable(fmt.Errorf("no CompositionDefinition reports serving %s %s/%s yet, so its chart's schema and policies cannot be applied: retry once the definition of that version is Ready (kubectl get compositiondefinitions -A -o wide)",
		pinned.Kind, pinned.Group, pinned.Version))
}

// namespaceLabels reads the labels of namespace for namespaceSelector. A namespace the
// cache has not seen yet is read from the API server; one that cannot be read is an
// error, never "no labels", which would leave selected policies silently unmatched.
func (p *policyCheck) namespaceLabels(ctx context.Context, namespace string) (map[string]string, error) {
	ns := &corev1.Namespace{}
	// Only read: the cache need not copy the namespace for each review.
	err := p.cached.Get(ctx, client.ObjectKey{Name: namespace}, ns, client.UnsafeDisableDeepCopy)
	if apierrors.IsNotFound(err) && p.live != nil {
		err = p.live.Get(ctx, client.ObjectKey{Name: namespace}, ns)
	}
	if err != nil {
		return nil, fmt.Errorf("reading namespace %s for the policies' namespaceSelector: %w", namespace, err)
	}
	return ns.Labels, nil
}

// errUndecidable marks a request that cannot be decided: admission refuses it, since
// admitting it would let it through unjudged.
type errUndecidable struct{ error }

func (e errUndecidable) Unwrap() error { return e.error }

func undecidable(err error) error {
	if err == nil {
		return nil
	}
	return errUndecidable{err}
}

// compilePolicy refuses a CompositionPolicy whose Rego does not compile, with the line
// and column of every error.
func compilePolicy(ctx context.Context, req *Request) (field.ErrorList, admission.Warnings) {
	if req.Object == nil || req.Kind.Kind != "CompositionPolicy" {
		return nil, nil
	}
	obj := &policyv1alpha1.CompositionPolicy{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(req.Object.Object, obj); err != nil {
		return field.ErrorList{field.Invalid(field.NewPath("spec"), nil, err.Error())}, nil
	}
	p, err := policies.FromCompositionPolicy(obj)
	if err == nil {
		err = policies.Compile(ctx, p)
	}
	if err == nil {
		return nil, nil
	}
	regoPath := field.NewPath("spec", "rego")
	compileErrs := policies.CompileErrorsOf(err)
	if len(compileErrs) == 0 {
		return field.ErrorList{field.Invalid(regoPath, field.OmitValueType{}, err.Error())}, nil
	}
	var errs field.ErrorList
	for _, e := range compileErrs {
		at := fmt.Sprintf("%d:%d", e.Line, e.Column)
		if e.Column == 0 { // OPA knows only the line of some errors
			at = fmt.Sprintf("line %d", e.Line)
		}
		errs = append(errs, field.Invalid(regoPath, field.OmitValueType{}, at+": "+e.Message))
	}
	return errs, nil
}

// verdict is the answer to a validated request: Compositor's own field errors and the
// schema and policy decision, in one response.
func verdict(req *Request, errs field.ErrorList, warnings admission.Warnings, decision policies.Decision) admission.Response {
	warnings = append(warnings, decision.Warnings()...)
	if !decision.Denied() {
		return respond(req, errs, warnings)
	}
	var lines []string
	var causes []metav1.StatusCause
	for _, e := range errs {
		lines = append(lines, e.Error())
		causes = append(causes, metav1.StatusCause{Type: metav1.CauseType(e.Type), Field: e.Field, Message: e.ErrorBody()})
	}
	for _, v := range decision.Violations {
		if v.Action != policyv1alpha1.EnforcementDeny {
			continue
		}
		line := v.String()
		lines = append(lines, line)
		causes = append(causes, metav1.StatusCause{Type: metav1.CauseTypeFieldValueInvalid, Field: v.Path, Message: strings.TrimPrefix(line, v.Path+": ")})
	}
	code, reason := int32(http.StatusForbidden), metav1.StatusReasonForbidden
	if len(errs) > 0 || decision.Reason() == metav1.StatusReasonInvalid {
		code, reason = http.StatusUnprocessableEntity, metav1.StatusReasonInvalid
	}
	return admission.Response{AdmissionResponse: admissionv1.AdmissionResponse{
		Allowed: false,
		Result: &metav1.Status{
			Status:  metav1.StatusFailure,
			Code:    code,
			Reason:  reason,
			Message: strings.Join(lines, "\n"),
			Details: &metav1.StatusDetails{Group: req.Kind.Group, Kind: req.Kind.Kind, Name: req.Name, Causes: causes},
		},
		Warnings: warnings,
	}}
}

// undecided answers a request on which no decision could be made: it is refused, with
// the reason, so nothing is admitted unjudged.
func undecided(err error) admission.Response {
	code := int32(http.StatusInternalServerError)
	if errors.As(err, new(errUndecidable)) {
		code = http.StatusServiceUnavailable
	}
	return admission.Errored(code, err)
}
