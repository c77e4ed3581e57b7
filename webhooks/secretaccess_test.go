package webhooks

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

func definitionRequest(op admissionv1.Operation, object, old map[string]any) *Request {
	req := &Request{Request: admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		Operation: op, Namespace: "team-a",
		Kind: metav1.GroupVersionKind{Group: "core.krateo.io", Version: "v1alpha1", Kind: "CompositionDefinition"},
	}}}
	if object != nil {
		req.Object = &unstructured.Unstructured{Object: object}
	}
	if old != nil {
		req.OldObject = &unstructured.Unstructured{Object: old}
	}
	return req
}

func withPasswordRef(name string) map[string]any {
	spec := map[string]any{"chart": map[string]any{"url": "https://charts.example.com", "repo": "app", "version": "1.0.0"}}
	if name != "" {
		spec["chart"].(map[string]any)["credentials"] = map[string]any{
			"username":    "u",
			"passwordRef": map[string]any{"name": name, "namespace": "team-a", "key": "password"},
		}
	}
	return map[string]any{"apiVersion": "core.krateo.io/v1alpha1", "kind": "CompositionDefinition", "spec": spec}
}

// Without an authorizer nothing can tell whether the author may read the Secret, so a
// definition that names one is refused; one that names none, or keeps its reference on
// update, is not asked about. The decisions themselves are the API server's: see
// test/e2e TestDefinitionAuthorMustBeAbleToReadTheSecret.
func TestSecretAccessWithoutAuthorizerFailsClosed(t *testing.T) {
	check := secretAccess{}
	errs, _ := check.Check(context.Background(), definitionRequest(admissionv1.Create, withPasswordRef("repo-password"), nil))
	require.Len(t, errs, 1)
	assert.Equal(t, "spec.chart.credentials.passwordRef", errs[0].Field)
	assert.Contains(t, errs[0].Error(), "definitions with credentials are refused")

	errs, _ = check.Check(context.Background(), definitionRequest(admissionv1.Update, withPasswordRef("other"), withPasswordRef("repo-password")))
	assert.Len(t, errs, 1, "a changed reference is asked about")

	for name, req := range map[string]*Request{
		"no credentials":          definitionRequest(admissionv1.Create, withPasswordRef(""), nil),
		"reference kept":          definitionRequest(admissionv1.Update, withPasswordRef("repo-password"), withPasswordRef("repo-password")),
		"delete":                  definitionRequest(admissionv1.Delete, nil, withPasswordRef("repo-password")),
		"credentials removed now": definitionRequest(admissionv1.Update, withPasswordRef(""), withPasswordRef("repo-password")),
	} {
		errs, _ := check.Check(context.Background(), req)
		assert.Empty(t, errs, name)
	}
}
