package webhooks

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
	kjson "sigs.k8s.io/json"

	corev1alpha1 "github.com/compositor-dev/compositor/api/core/v1alpha1"
	policyv1alpha1 "github.com/compositor-dev/compositor/api/policy/v1alpha1"
	"github.com/compositor-dev/compositor/api/vocab"
	"github.com/compositor-dev/compositor/conversion"
	"github.com/compositor-dev/compositor/internal/fairshare"
	"github.com/compositor-dev/compositor/policies"
)

// Paths the webhook server answers on.
const (
	MutatePath   = "/mutate"
	ValidatePath = "/validate"
)

// MaxRequestBytes caps a request body, as the API server caps its own requests.
const MaxRequestBytes = 3 << 20

// handlerTimeout bounds the time to read a request and answer it, so a slow or stuck
// client cannot hold a handler forever. It is above the webhook timeout the API server
// waits for, so a request the API server still waits on is never cut short.
const handlerTimeout = 30 * time.Second

var policyGroup = policyv1alpha1.GroupVersion.Group

// Options are what the handlers need from the cluster.
type Options struct {
	// Cached reads CompositionDefinitions and Namespaces; a manager's cached client is
	// right.
	Cached client.Reader
	// Live reads from the API server directly, for checks that must see writes made a
	// moment ago.
	Live client.Reader
	// Judge validates against the chart's JSON Schema and the Rego policies; nil
	// skips both.
	Judge *policies.Judge
	// Charts gives compositions the chart of their definition for the schema check.
	Charts ChartSource
	// Capabilities are the cluster's, for the charts' .Capabilities when a write is
	// rendered; nil renders with Helm's defaults.
	Capabilities *policies.ClusterCapabilities
	// Authorizer asks the API server whether a definition's author may get the Secret
	// it names; without one, definitions with credentials are refused.
	Authorizer Authorizer
	// ReleaseNames knows the release names of compositions; without it, a release name
	// is checked only against Helm's records.
	ReleaseNames *ReleaseNames
	// Users are the user names Compositor runs as (a SelfSubjectReview at start): with
	// the ServiceAccounts of the composition controllers it runs, the only users whose
	// writes of a composition's status are admitted (see StatusGuard).
	Users []string
	// Limits bound every object written before anything expensive runs; the zero
	// value means policies.DefaultLimits.
	Limits policies.Limits
	// LaneConcurrency is how many admission evaluations one namespace's compositions
	// (or definitions, or the policies) may run at once; 0 means
	// DefaultLaneConcurrency.
	LaneConcurrency int
	// Unbounded, for measurements only (make bench), turns the limits and the lanes
	// off, so that their cost on the ordinary path can be measured.
	Unbounded bool
	// Revisions proves the CompositionRevisions a rollback restores (the release
	// seal); without it, rollbacks are refused.
	Revisions RevisionVerifier
	// Namespace is Compositor's own, where the controllers' identities live: no
	// composition is created there, and only the controllers' ServiceAccounts of it
	// write statuses (see identityNamespaceCheck, StatusGuard).
	Namespace string
}

// Register mounts the admission handlers on srv.
func Register(srv webhook.Server, opts Options) {
	mutator, validator := newHandlers(opts)
	srv.Register(MutatePath, guard(mutator))
	srv.Register(ValidatePath, guard(validator))
	srv.Register(StatusPath, guard(validator.status))
	srv.Register(ConvertPath, NewConverter(validator.schemas))
}

// newHandlers returns the admission handlers of /mutate and /validate.
func newHandlers(opts Options) (*Mutator, *Validator) {
	v := &Validator{
		Compositions: compositionChecks(opts.Cached, releaseNames(opts.ReleaseNames), opts.Namespace),
		Definitions:  definitionChecks(opts.Live, opts.Authorizer),
		Policies:     Chain{CheckFunc(compilePolicy)},
		status:       &StatusGuard{Users: opts.Users, Definitions: opts.Cached, Namespace: opts.Namespace, Records: opts.Live},
		limits:       opts.Limits,
		lanes:        newLanes(opts.LaneConcurrency),
	}
	if v.limits == (policies.Limits{}) {
		v.limits = policies.DefaultLimits()
	}
	if opts.Unbounded {
		v.limits, v.lanes = policies.Limits{}, nil
	}
	if opts.Cached != nil {
		v.schemas = conversion.NewCRDSchemas(opts.Cached, opts.Live)
	}
	m := &Mutator{Definitions: opts.Cached, Live: opts.Live, Revisions: opts.Revisions, schemas: v.schemas}
	if opts.Judge != nil {
		v.decider = &policyCheck{judge: opts.Judge, charts: opts.Charts, cached: opts.Cached, live: opts.Live, memo: newReviewMemo(), capabilities: opts.Capabilities}
		if v.schemas != nil {
			v.decider.schemas = v.schemas
		}
		m.Screen = v
	}
	return m, v
}

// Mutator answers /mutate: it defaults compositions and leaves Compositor's other
// objects alone.
type Mutator struct {
	// Definitions reads CompositionDefinitions to find a composition's default release
	// name.
	Definitions client.Reader
	// Screen, when set, validates the defaulted composition here already. The API
	// server checks the generated CRD's schema after the mutating webhooks and before
	// the validating ones, and stops at the first refusal: a write that breaks both the
	// chart's schema (which the CRD carries in part) and a policy would learn of the
	// policy only once the schema errors are fixed. So a write that breaks the schema is
	// denied here, with every violation at once. Any other write is left to the
	// validating webhook, which decides on the object as stored, after every mutating
	// webhook, Compositor's and others', has run.
	Screen *Validator
	// Live reads the CompositionRevisions a rollback restores, and Revisions proves
	// them (revisions.go); without either, a rollback is refused.
	Live      client.Reader
	Revisions RevisionVerifier
	// schemas convert a restored spec to the version the rollback is written through.
	schemas conversion.SchemaSource
}

var _ admission.Handler = &Mutator{}

// Handle implements admission.Handler.
func (m *Mutator) Handle(ctx context.Context, ar admission.Request) admission.Response {
	req, bad := decode(ar)
	if bad != nil {
		return *bad
	}
	switch req.Kind.Group {
	case vocab.CompositionGroup:
	case corev1alpha1.GroupVersion.Group, policyGroup:
		return admission.Allowed("")
	default:
		return unsupportedKind(req.Kind)
	}
	if req.SubResource != "" {
		// Defaulting is for the object itself; a subresource write (its rules name none)
		// cannot change the metadata it sets.
		return admission.Allowed("")
	}
	if req.Object == nil || (req.Operation != admissionv1.Create && req.Operation != admissionv1.Update) {
		return admission.Allowed("")
	}
	if m.Screen != nil {
		// Bounded before anything else runs.
		if resp, ok := boundObject(m.Screen.limits, req); !ok {
			return resp
		}
	}
	annotations, labels := req.Object.GetAnnotations(), req.Object.GetLabels()
	var written *unstructured.Unstructured
	if mayReplace(req) {
		written = req.Object.DeepCopy()
	}
	// A rollback first: it sets the spec and the pin the rest judges.
	replaced, refusal := m.rollback(ctx, req)
	if refusal != nil {
		return *refusal
	}
	replaced = stampAuthor(req) || replaced
	if err := defaultComposition(ctx, m.Definitions, req); err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	}
	if m.Screen != nil && m.Screen.decider != nil {
		resp := m.Screen.gated(ctx, req, func(ctx context.Context) admission.Response {
			if r, broken := m.Screen.decider.breaksSchema(ctx, req); broken {
				// Denied here with every violation at once. An admitted object's warnings
				// are left to the validating webhook, so that kubectl prints each once.
				if resp, decision := m.Screen.review(ctx, req, r); !resp.Allowed {
					countViolations(decision)
					return resp
				}
			}
			return admission.Allowed("")
		})
		if !resp.Allowed {
			return resp
		}
	}
	if replaced && written != nil {
		return fullPatch(written, req.Object)
	}
	return admission.Patched("", defaultingPatch(annotations, labels, req.Object)...)
}

// Validator answers /validate: it runs the chain of checks of the object's kind.
type Validator struct {
	// Compositions checks every write to a composition.
	Compositions Chain
	// Definitions checks every write to a CompositionDefinition.
	Definitions Chain
	// Policies checks every write to a CompositionPolicy.
	Policies Chain

	// decider runs the schema and policies after the checks; nil skips them.
	decider *policyCheck
	// schemas are the generated CRDs' schemas, shared with the conversion webhook.
	schemas conversion.SchemaSource
	// status judges writes of a composition's status (StatusPath); nil refuses them.
	status *StatusGuard
	// limits bound every object before the checks; the zero value bounds nothing.
	limits policies.Limits
	// lanes share the evaluations between namespaces; nil runs each at once.
	lanes *fairshare.Lanes
}

var _ admission.Handler = &Validator{}

// Handle implements admission.Handler.
func (v *Validator) Handle(ctx context.Context, ar admission.Request) admission.Response {
	if ar.SubResource != "" {
		return v.subresource(ctx, ar)
	}
	req, bad := decode(ar)
	if bad != nil {
		return *bad
	}
	if isRevision(req.Kind) {
		return admission.Allowed("")
	}
	if resp, ok := boundObject(v.limits, req); !ok {
		return resp
	}
	return v.gated(ctx, req, func(ctx context.Context) admission.Response {
		resp, decision := v.review(ctx, req, nil)
		countViolations(decision)
		return resp
	})
}

// subresource answers a write of a subresource, which the rules of ValidatePath never
// send (StatusPath has the status of compositions): the checks, the schema and the
// policies judge an object's spec and metadata, which such a write cannot change, so
// none of them runs. A composition's status is judged as on StatusPath; other
// subresources are left to the API server's authorization.
func (v *Validator) subresource(ctx context.Context, ar admission.Request) admission.Response {
	switch {
	case ar.Kind.Group != vocab.CompositionGroup && ar.Kind.Group != corev1alpha1.GroupVersion.Group && ar.Kind.Group != policyGroup:
		return unsupportedKind(ar.Kind)
	case ar.Kind.Group != vocab.CompositionGroup || ar.SubResource != "status":
		return admission.Allowed("")
	case v.status == nil:
		return statusRefused(ar)
	default:
		return v.status.Handle(ctx, ar)
	}
}

// review runs the checks of req's kind, then the schema and the policies, and answers
// with all they found. The decision is that of the schema and the policies, on built
// when the caller already built req's policy request, else on one built here.
func (v *Validator) review(ctx context.Context, req *Request, built *policies.Request) (admission.Response, policies.Decision) {
	var checks Chain
	switch req.Kind.Group {
	case vocab.CompositionGroup:
		checks = v.Compositions
	case corev1alpha1.GroupVersion.Group:
		checks = v.Definitions
	case policyGroup:
		checks = v.Policies
	default:
		return unsupportedKind(req.Kind), policies.Decision{}
	}
	errs, warnings := checks.Run(ctx, req)
	if req.Kind.Group == vocab.CompositionGroup && v.schemas != nil {
		warnings = append(warnings, foreignValues(ctx, v.schemas, req)...)
	}
	if v.decider == nil || req.Kind.Group == policyGroup || leaving(req) {
		return respond(req, errs, warnings), policies.Decision{}
	}
	var decision policies.Decision
	var err error
	if built == nil {
		built, err = v.decider.request(ctx, req, v.decider.memo.take(req.UID))
	}
	if err == nil {
		decision, err = v.decider.judge.Decide(ctx, built)
	}
	if err != nil {
		if len(errs) > 0 { // refused already, for reasons the user can act on
			return respond(req, errs, warnings), policies.Decision{}
		}
		return undecided(err), policies.Decision{}
	}
	if req.Kind.Group == vocab.CompositionGroup {
		e, w := unreadValues(ctx, v.decider, req, built, decision, warnings)
		errs, warnings = append(errs, e...), append(warnings, w...)
	}
	return verdict(req, errs, warnings, decision), decision
}

// leaving reports whether req only finishes the deletion of an object: an update of an
// object that is being deleted (the API server keeps the old deletionTimestamp) that
// leaves its spec, labels and annotations as they were, such as its controller removing
// a finalizer. The schema and the policies are not asked: refusing would strand the
// object undeleted. Any other change to a deleted object is checked as usual.
func leaving(req *Request) bool {
	if req.Operation != admissionv1.Update || req.OldObject.GetDeletionTimestamp() == nil {
		return false
	}
	old, updated := req.OldObject, req.Object
	return equality.Semantic.DeepEqual(old.Object["spec"], updated.Object["spec"]) &&
		equality.Semantic.DeepEqual(old.GetLabels(), updated.GetLabels()) &&
		equality.Semantic.DeepEqual(old.GetAnnotations(), updated.GetAnnotations())
}

// reviewServer is the HTTP side of an admission webhook: it reads and decodes one
// admission.k8s.io/v1 AdmissionReview, hands its request to the webhook and encodes the
// answer. A body that is not such a review gets a 4xx status and a message saying why.
type reviewServer struct {
	webhook *admission.Webhook
}

// guard wraps an admission handler in a reviewServer whose whole exchange, reading the
// body included, is bounded in time.
func guard(h admission.Handler) http.Handler {
	return http.TimeoutHandler(reviewServer{webhook: &admission.Webhook{Handler: h, LogConstructor: requestLogger}}, handlerTimeout,
		"the admission request took too long to read or answer")
}

// The body is read on the request's goroutine; decoding and deciding run on a warm one
// (see warmGoroutines).
func (s reviewServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, status, err := readJSONBody(w, r)
	if err != nil {
		writeReview(w, status, admission.Errored(int32(status), err).AdmissionResponse)
		return
	}
	reviewGoroutines.run(func() {
		review, status, err := decodeReview(body)
		if err != nil {
			writeReview(w, status, admission.Errored(int32(status), err).AdmissionResponse)
			return
		}
		resp := s.webhook.Handle(r.Context(), admission.Request{AdmissionRequest: *review.Request})
		writeReview(w, http.StatusOK, resp.AdmissionResponse)
	})
}

// decodeReview decodes body as an AdmissionReview, or says which status refuses it and
// why.
//
// The objects are decoded in the same pass, into the review's RawExtensions' Object (see
// decode): decoding them from Raw afterwards scanned and copied them twice more. A body
// that does not decode so is decoded again the plain way, for its error.
func decodeReview(body []byte) (*admissionv1.AdmissionReview, int, error) {
	review := &admissionv1.AdmissionReview{}
	if doc := (reviewDocument{}); kjson.UnmarshalCaseSensitivePreserveInts(body, &doc) == nil && doc.Request != nil {
		review.TypeMeta, review.Request = doc.TypeMeta, &doc.Request.AdmissionRequest
		review.Request.Object = reviewObject(doc.Request.Object)
		review.Request.OldObject = reviewObject(doc.Request.OldObject)
	} else if err := kjson.UnmarshalCaseSensitivePreserveInts(body, review); err != nil {
		return nil, http.StatusBadRequest, fmt.Errorf("the body is not an AdmissionReview: %w", err)
	}
	if gvk := review.GroupVersionKind(); gvk != admissionv1.SchemeGroupVersion.WithKind("AdmissionReview") {
		return nil, http.StatusBadRequest, fmt.Errorf("expected an AdmissionReview of %s, got apiVersion %q kind %q",
			admissionv1.SchemeGroupVersion, review.APIVersion, review.Kind)
	}
	if review.Request == nil {
		return nil, http.StatusBadRequest, errors.New("the AdmissionReview has no request")
	}
	return review, http.StatusOK, nil
}

// reviewDocument is an AdmissionReview whose objects decode as JSON objects.
type reviewDocument struct {
	metav1.TypeMeta `json:",inline"`
	Request         *struct {
		admissionv1.AdmissionRequest `json:",inline"`
		Object                       map[string]any `json:"object"`
		OldObject                    map[string]any `json:"oldObject"`
	} `json:"request"`
}

// reviewObject is an object reviewDocument decoded, for decode to take; nil (absent or
// null) is no object.
func reviewObject(m map[string]any) runtime.RawExtension {
	if m == nil {
		return runtime.RawExtension{}
	}
	return runtime.RawExtension{Object: &unstructured.Unstructured{Object: m}}
}

// readJSONBody reads the JSON body of a POST of at most MaxRequestBytes, or says which
// status refuses it and why.
func readJSONBody(w http.ResponseWriter, r *http.Request) ([]byte, int, error) {
	if r.Method != http.MethodPost {
		return nil, http.StatusMethodNotAllowed, fmt.Errorf("method %s is not allowed; send a POST", r.Method)
	}
	if r.ContentLength > MaxRequestBytes {
		return nil, http.StatusRequestEntityTooLarge, fmt.Errorf("the request body is %d bytes; the limit is %d", r.ContentLength, MaxRequestBytes)
	}
	// Sized for the declared length, so that reading does not grow the buffer again
	// and again.
	buf := bytes.NewBuffer(make([]byte, 0, max(r.ContentLength, 0)+bytes.MinRead))
	_, err := buf.ReadFrom(http.MaxBytesReader(w, r.Body, MaxRequestBytes))
	body := buf.Bytes()
	if tooLarge := (*http.MaxBytesError)(nil); errors.As(err, &tooLarge) {
		return nil, http.StatusRequestEntityTooLarge, fmt.Errorf("the request body is over the limit of %d bytes", MaxRequestBytes)
	}
	if err != nil {
		return nil, http.StatusBadRequest, fmt.Errorf("reading the request body: %w", err)
	}
	if len(body) == 0 {
		return nil, http.StatusBadRequest, errors.New("the request body is empty")
	}
	if mediaType, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mediaType != "application/json" {
		return nil, http.StatusUnsupportedMediaType, fmt.Errorf("content type %q is not supported; send application/json", r.Header.Get("Content-Type"))
	}
	return body, http.StatusOK, nil
}

func writeReview(w http.ResponseWriter, status int, resp admissionv1.AdmissionResponse) {
	review := admissionv1.AdmissionReview{Response: &resp}
	review.SetGroupVersionKind(admissionv1.SchemeGroupVersion.WithKind("AdmissionReview"))
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(review)
}

// releaseNames is names as the check's interface: nil stays nil.
func releaseNames(names *ReleaseNames) releaseNameUsers {
	if names == nil {
		return nil
	}
	return names
}
