package webhooks

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// A composition is never created in Compositor's own namespace, which holds the
// identities it and its controllers run as: one rule over the namespace, whatever the
// composition would render. Elsewhere, and for writes other than a create (an
// existing one can still be deleted and its finalizer removed), the check is silent.
func TestNoCompositionInCompositorsNamespace(t *testing.T) {
	check := identityNamespaceCheck{namespace: "compositor-system"}
	request := func(namespace string, op admissionv1.Operation) *Request {
		return &Request{Request: admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
			Namespace: namespace, Name: "web", Operation: op,
			Kind: metav1.GroupVersionKind{Group: "composition.krateo.io", Version: "v1-1-5", Kind: "FireworksApp"},
		}}}
	}
	errs, _ := check.Check(context.Background(), request("compositor-system", admissionv1.Create))
	require.Len(t, errs, 1)
	assert.Equal(t, "metadata.namespace", errs[0].Field)
	assert.Contains(t, errs[0].Detail, "namespace compositor-system is Compositor's own: it holds the identities")

	for _, tc := range []struct {
		namespace string
		op        admissionv1.Operation
	}{{"team-a", admissionv1.Create}, {"compositor-system", admissionv1.Update}, {"compositor-system", admissionv1.Delete}} {
		errs, _ := check.Check(context.Background(), request(tc.namespace, tc.op))
		assert.Empty(t, errs, "%s %s", tc.op, tc.namespace)
	}
	errs, _ = identityNamespaceCheck{}.Check(context.Background(), request("compositor-system", admissionv1.Create))
	assert.Empty(t, errs, "no namespace known, nothing refused")
}
