package webhooks

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	admissionv1 "k8s.io/api/admission/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	corev1alpha1 "github.com/compositor-dev/compositor/api/core/v1alpha1"
)

// Request is an admission request with its objects decoded. Object is nil on DELETE,
// OldObject is nil on CREATE.
type Request struct {
	admission.Request
	Object    *unstructured.Unstructured
	OldObject *unstructured.Unstructured

	// The composition's definition as the cache knows it, once read (see
	// cachedOwningDefinition).
	definitionRead bool
	definition     *corev1alpha1.CompositionDefinition
	definitionErr  error
}

// Check inspects one aspect of a request. It returns every violation it finds, with
// field paths, and warnings for the caller; it never stops at the first problem.
type Check interface {
	Check(ctx context.Context, req *Request) (field.ErrorList, admission.Warnings)
}

// CheckFunc adapts a function to a Check.
type CheckFunc func(ctx context.Context, req *Request) (field.ErrorList, admission.Warnings)

// Check calls f.
func (f CheckFunc) Check(ctx context.Context, req *Request) (field.ErrorList, admission.Warnings) {
	return f(ctx, req)
}

var _ Check = CheckFunc(nil)

// Chain runs every check and collects all their violations and warnings.
type Chain []Check

// Run returns the errors and warnings of every check in order.
func (c Chain) Run(ctx context.Context, req *Request) (field.ErrorList, admission.Warnings) {
	var errs field.ErrorList
	var warnings admission.Warnings
	for _, check := range c {
		e, w := check.Check(ctx, req)
		errs = append(errs, e...)
		warnings = append(warnings, w...)
	}
	return errs, warnings
}

// decode turns an admission request into a Request. Its error is a response to return
// as it is: the request was malformed.
func decode(req admission.Request) (*Request, *admission.Response) {
	if req.UID == "" || req.Kind.Kind == "" || req.Operation == "" {
		resp := admission.Errored(http.StatusBadRequest, fmt.Errorf("the AdmissionReview has no request, or its request lacks uid, kind or operation"))
		return nil, &resp
	}
	r := &Request{Request: req}
	var err error
	if r.Object, err = decodeObject("object", req.Object); err == nil {
		r.OldObject, err = decodeObject("oldObject", req.OldObject)
	}
	if err != nil {
		resp := admission.Errored(http.StatusBadRequest, err)
		return nil, &resp
	}
	switch {
	case r.Object == nil && req.Operation != admissionv1.Delete:
		err = fmt.Errorf("request.object is required for %s", req.Operation)
	case r.OldObject == nil && req.Operation != admissionv1.Create && req.Operation != admissionv1.Connect:
		err = fmt.Errorf("request.oldObject is required for %s", req.Operation)
	}
	if err != nil {
		resp := admission.Errored(http.StatusBadRequest, err)
		return nil, &resp
	}
	return r, nil
}

// decodeObject is the object in ext: the one decodeReview decoded with the review, or
// else its JSON.
func decodeObject(name string, ext runtime.RawExtension) (*unstructured.Unstructured, error) {
	if obj, ok := ext.Object.(*unstructured.Unstructured); ok && len(ext.Raw) == 0 {
		return obj, nil
	}
	raw := ext.Raw
	if len(raw) == 0 {
		return nil, nil
	}
	obj := &unstructured.Unstructured{}
	// Numbers are decoded as client-go decodes them for the controller (int64 for
	// integers, float64 otherwise), so the schema, the policies and rendering see the
	// values Helm will be given at install.
	if err := utiljson.Unmarshal(raw, &obj.Object); err != nil {
		return nil, fmt.Errorf("request.%s is not a JSON object: %w", name, err)
	}
	if obj.Object == nil {
		return nil, nil // a JSON null
	}
	return obj, nil
}

// respond turns the outcome of a chain into an admission response: allowed with the
// warnings when there are no errors, else denied with every error, as 403 Forbidden
// when they all forbid the operation and 422 Invalid otherwise.
func respond(req *Request, errs field.ErrorList, warnings admission.Warnings) admission.Response {
	if len(errs) == 0 {
		return admission.Allowed("").WithWarnings(warnings...)
	}
	var denial *apierrors.StatusError
	if len(errs.Filter(field.NewErrorTypeMatcher(field.ErrorTypeForbidden))) == 0 {
		gr := schema.GroupResource{Group: req.Resource.Group, Resource: req.Resource.Resource}
		denial = apierrors.NewForbidden(gr, req.Name, errs.ToAggregate())
	} else {
		denial = apierrors.NewInvalid(schema.GroupKind{Group: req.Kind.Group, Kind: req.Kind.Kind}, req.Name, errs)
	}
	return admission.Response{
		AdmissionResponse: admissionv1.AdmissionResponse{
			Allowed:  false,
			Result:   &denial.ErrStatus,
			Warnings: warnings,
		},
	}
}

// normalizeJSON re-reads obj as decodeObject would, so its numbers take the types
// client-go gives the controller.
func normalizeJSON(obj map[string]any) (map[string]any, error) {
	raw, err := json.Marshal(obj)
	if err != nil {
		return nil, err
	}
	out := map[string]any{}
	if err := utiljson.Unmarshal(raw, &out); err != nil {
		return nil, err
	}
	return out, nil
}
