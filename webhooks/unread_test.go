package webhooks

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	chartcommon "helm.sh/helm/v4/pkg/chart/common"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/compositor-dev/compositor/policies"
)

func unreadRequest(op admissionv1.Operation, validation string, spec, oldSpec map[string]any) (*Request, *policies.Request) {
	ar := admissionv1.AdmissionRequest{
		Operation: op,
		Kind:      metav1.GroupVersionKind{Group: "composition.krateo.io", Version: "v1-0-0", Kind: "WebApp"},
	}
	if validation != "" {
		ar.Options = runtime.RawExtension{Raw: []byte(`{"kind":"CreateOptions","apiVersion":"meta.k8s.io/v1","fieldValidation":"` + validation + `"}`)}
	}
	req := &Request{Request: admission.Request{AdmissionRequest: ar},
		Object: &unstructured.Unstructured{Object: map[string]any{"spec": spec}}}
	if oldSpec != nil {
		req.OldObject = &unstructured.Unstructured{Object: map[string]any{"spec": oldSpec}}
	}
	w := policies.Write{Operation: string(op), Kind: ar.Kind, Object: req.Object.Object}
	if req.OldObject != nil {
		w.OldObject = req.OldObject.Object
	}
	r := policies.NewRequest(w)
	r.Chart = &chart.Chart{Metadata: &chart.Metadata{Name: "web", Version: "1.0.0"},
		Values:    map[string]any{"replicaCount": 1},
		Templates: []*chartcommon.File{{Name: "templates/a.yaml", Data: []byte(`{{ .Values.replicaCount }}`)}}}
	return req, r
}

func TestUnreadValuesFollowTheWritersFieldValidation(t *testing.T) {
	judge := policies.NewJudge(policies.JudgeOptions{})
	spec := map[string]any{"replicaCount": 2, "replicaCuont": 3}
	const told = "spec.replicaCuont: WebApp v1-0-0 has no such value (did you mean spec.replicaCount?)"

	for _, validation := range []string{"", "Warn", "nonsense"} {
		req, r := unreadRequest(admissionv1.Create, validation, spec, nil)
		errs, warnings := unreadValues(t.Context(), &policyCheck{judge: judge}, req, r, policies.Decision{}, nil)
		assert.Empty(t, errs, validation)
		assert.Equal(t, []string{told}, []string(warnings), "%q warns", validation)
	}

	req, r := unreadRequest(admissionv1.Create, "Strict", spec, nil)
	errs, warnings := unreadValues(t.Context(), &policyCheck{judge: judge}, req, r, policies.Decision{}, nil)
	assert.Empty(t, warnings)
	require.Len(t, errs, 1)
	assert.Contains(t, errs[0].Error(), "spec.replicaCuont: Invalid value: WebApp v1-0-0 has no such value (did you mean spec.replicaCount?)")

	req, r = unreadRequest(admissionv1.Create, "Ignore", spec, nil)
	errs, warnings = unreadValues(t.Context(), &policyCheck{judge: judge}, req, r, policies.Decision{}, nil)
	assert.Empty(t, errs)
	assert.Empty(t, warnings)

	// An update is told only of what it changes.
	req, r = unreadRequest(admissionv1.Update, "Strict", map[string]any{"replicaCuont": 3, "other": 1}, map[string]any{"replicaCuont": 3})
	errs, _ = unreadValues(t.Context(), &policyCheck{judge: judge}, req, r, policies.Decision{}, nil)
	require.Len(t, errs, 1)
	assert.Equal(t, "spec.other", errs[0].Field)

	// Refused by the schema already: named once, and the rest only warned of.
	req, r = unreadRequest(admissionv1.Create, "Strict", map[string]any{"replicaCuont": 3, "other": 1}, nil)
	schema := policies.Decision{Violations: []policies.Violation{{Path: "spec.other", Message: "is not allowed", Source: policies.SourceSchema, Action: "deny"}}}
	errs, warnings = unreadValues(t.Context(), &policyCheck{judge: judge}, req, r, schema, nil)
	assert.Empty(t, errs)
	assert.Equal(t, []string{told}, []string(warnings))

	// A policy's violation at the key, which may be a dry run, takes nothing away.
	req, r = unreadRequest(admissionv1.Create, "Strict", map[string]any{"other": 1}, nil)
	dryRun := policies.Decision{Violations: []policies.Violation{{Path: "spec.other", Message: "no", Source: "policy p", Policy: "p", Action: "dryrun"}}}
	errs, _ = unreadValues(t.Context(), &policyCheck{judge: judge}, req, r, dryRun, nil)
	assert.Len(t, errs, 1)

	// A key another warning names first is not warned of twice.
	req, r = unreadRequest(admissionv1.Create, "Warn", spec, nil)
	_, warnings = unreadValues(t.Context(), &policyCheck{judge: judge}, req, r, policies.Decision{}, []string{"spec.replicaCuont is not a value of WebApp v1-0-0 (v0-9-0 has it)"})
	assert.Empty(t, warnings)
}

// Attack: the keys are the writer's. A key that would rewrite the terminal, or
// thousands of them, get an answer of bounded size that says what they are.
func TestUnreadValuesAnswersAreBoundedAndPrintable(t *testing.T) {
	judge := policies.NewJudge(policies.JudgeOptions{})
	spec := map[string]any{"\x1b[2Jcleared\u202e": 1, strings.Repeat("k", 10000): 1}
	for i := range 5000 {
		spec[fmt.Sprintf("junk%05d", i)] = i
	}
	req, r := unreadRequest(admissionv1.Create, "Warn", spec, nil)
	errs, warnings := unreadValues(t.Context(), &policyCheck{judge: judge}, req, r, policies.Decision{}, nil)
	assert.Empty(t, errs)
	require.Len(t, warnings, maxUnreadTold+1)
	for _, w := range warnings {
		assert.LessOrEqual(t, len(w), policies.MaxWarningLength)
		assert.NotContains(t, w, "\x1b")
		assert.NotContains(t, w, "\u202e")
	}
	assert.Contains(t, warnings[0], `spec[\x1b[2Jcleared\u202e]: WebApp v1-0-0 has no such value`)
	assert.Equal(t, "spec: 4982 more keys: WebApp v1-0-0 has no such values", warnings[maxUnreadTold])

	req, r = unreadRequest(admissionv1.Create, "Strict", spec, nil)
	errs, _ = unreadValues(t.Context(), &policyCheck{judge: judge}, req, r, policies.Decision{}, nil)
	assert.Len(t, errs, maxUnreadTold+1)
	for _, e := range errs {
		assert.LessOrEqual(t, len(e.Error()), 512, "one refusal stays short: %.80s", e.Error())
	}
}
