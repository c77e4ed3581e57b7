package webhooks

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	policyv1alpha1 "github.com/compositor-dev/compositor/api/policy/v1alpha1"
	"github.com/compositor-dev/compositor/policies"
)

// unreadValues answers for the keys of a composition's values that its chart neither
// declares nor reads (a typo, most of the time, which Helm would take silently), as
// the API server answers for the unknown fields of built-in kinds, after the field
// validation the writer asked for: refused under Strict (`kubectl apply`'s default,
// --validate=strict), warned under Warn (--validate=warn, and clients that ask for
// none), silent under Ignore (--validate=false). An update is told only of the values
// it changes. r is the request the judge decides on, whose values are those the
// chart of the composition's pinned version reads. A key the decision names already
// (a schema that closes it out) is not told twice, and when the schema refuses the
// values the others are only warned of, whatever was asked. Nor is a key a warning of
// the answer names first (a value of another served version: foreignValues). A
// definition with spec.fieldValidation Strict makes every write of its compositions
// strict.
func unreadValues(ctx context.Context, p *policyCheck, req *Request, r *policies.Request, decision policies.Decision, warned admission.Warnings) (field.ErrorList, admission.Warnings) {
	if r == nil || (req.Operation != admissionv1.Create && req.Operation != admissionv1.Update) {
		return nil, nil
	}
	validation, why := fieldValidation(req), strictWrite
	if strictDefinition(ctx, p.cached, req) {
		validation, why = metav1.FieldValidationStrict, strictDefinitionWrite
	}
	if req.OldObject != nil && p.schemas != nil && req.Kind.Version != pinnedVersion(req) {
		// The values are compared as the chart of the pinned version reads them, the
		// old ones too.
		old, err := asReadBy(ctx, p.schemas, schema.GroupVersionKind(req.Kind), req.OldObject.Object, pinnedVersion(req))
		if err == nil {
			converted := *r
			converted.OldObject = old
			r = &converted
		}
	}
	errs, warnings := tellUnread(p.judge, r, pinnedVersion(req), validation, why, decision)
	return errs, slices.DeleteFunc(warnings, func(w string) bool {
		path, _, _ := strings.Cut(w, ": ")
		return slices.ContainsFunc(warned, func(first string) bool { return strings.HasPrefix(first, path+" ") })
	})
}

// Why a write is strict, as a refusal says it.
const (
	strictWrite           = "the write asked for strict field validation (kubectl apply --validate=warn warns instead)"
	strictDefinitionWrite = "its CompositionDefinition makes every write strict (spec.fieldValidation)"
)

// TellUnread is what an answer to r says of its unread values (see unreadValues): the
// errors that refuse it under validation Strict, else warnings; version names the
// version whose chart r's values are for. `compositor validate` tells them so too.
func TellUnread(judge *policies.Judge, r *policies.Request, version, validation string, decision policies.Decision) (field.ErrorList, []string) {
	return tellUnread(judge, r, version, validation, strictWrite, decision)
}

func tellUnread(judge *policies.Judge, r *policies.Request, version, validation, why string, decision policies.Decision) (field.ErrorList, []string) {
	if validation == metav1.FieldValidationIgnore {
		return nil, nil
	}
	unread, total := judge.Unread(r, maxUnreadTold)
	if total == 0 {
		return nil, nil
	}
	kind := r.Kind.Kind
	// The keys the chart's schema refuses already are not told twice; a policy's
	// violation, which may only warn or be a dry run, says nothing of them.
	named := map[string]bool{}
	for _, v := range decision.Violations {
		if v.IsSchema() && v.Action == policyv1alpha1.EnforcementDeny {
			named[v.Path] = true
		}
	}
	strict := validation == metav1.FieldValidationStrict && decision.Reason() != metav1.StatusReasonInvalid
	var errs field.ErrorList
	var warnings []string
	for _, u := range unread {
		switch {
		case named[u.Field()]:
		case strict:
			errs = append(errs, &field.Error{Type: field.ErrorTypeInvalid, Field: policies.Shorten(u.Field(), maxUnreadField),
				BadValue: field.OmitValueType{}, Detail: u.Message(kind, version) + ": " + why})
		default:
			warnings = append(warnings, u.Warning(kind, version))
		}
	}
	if total > len(unread) {
		more := fmt.Sprintf("%d more keys: %s %s has no such values", total-len(unread), kind, version)
		if strict {
			errs = append(errs, field.Invalid(field.NewPath("spec"), field.OmitValueType{}, more))
		} else {
			warnings = append(warnings, "spec: "+more)
		}
	}
	return errs, warnings
}

// strictDefinition tells whether the composition req writes belongs to a definition
// that makes every write strict (spec.fieldValidation). A definition that cannot be
// read makes nothing strict: the decision says what is wrong with it.
func strictDefinition(ctx context.Context, cached client.Reader, req *Request) bool {
	if cached == nil {
		return false
	}
	def, _ := cachedOwningDefinition(ctx, cached, req)
	return def != nil && def.Spec.FieldValidation == metav1.FieldValidationStrict
}

// maxUnreadTold bounds the keys an answer names: a write of thousands of keys gets
// the first, in sorted order, and their number. maxUnreadField bounds the length of
// the path of one.
const (
	maxUnreadTold  = 20
	maxUnreadField = 128
)

// fieldValidation is the field validation req's writer asked for: Strict, Warn or
// Ignore; Warn when it asked for none, as the API server defaults it.
func fieldValidation(req *Request) string {
	var opts struct {
		FieldValidation string `json:"fieldValidation"`
	}
	if raw := req.Options.Raw; len(raw) > 0 {
		_ = json.Unmarshal(raw, &opts) // options that do not decode ask for nothing
	}
	switch opts.FieldValidation {
	case metav1.FieldValidationStrict, metav1.FieldValidationIgnore:
		return opts.FieldValidation
	}
	return metav1.FieldValidationWarn
}
