package webhooks

import (
	"context"
	"fmt"

	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// identityNamespaceCheck refuses to create a composition in Compositor's own namespace.
// That namespace holds every identity Compositor manages: its own ServiceAccount and
// every generated controller's, their token Secrets, the release seal. A Pod, a token
// Secret or a TokenRequest may use a ServiceAccount of its own namespace only, so
// keeping compositions out of this one namespace keeps every release, whatever objects
// it renders, from mounting, minting or binding a managed identity. It is one rule over
// where identities live, not over object shapes. The install gate refuses the same.
type identityNamespaceCheck struct{ namespace string }

var namespacePath = field.NewPath("metadata", "namespace")

func (c identityNamespaceCheck) Check(_ context.Context, req *Request) (field.ErrorList, admission.Warnings) {
	if c.namespace == "" || req.Namespace != c.namespace || req.Operation != admissionv1.Create {
		return nil, nil
	}
	return field.ErrorList{field.Forbidden(namespacePath, fmt.Sprintf(
		"namespace %s is Compositor's own: it holds the identities Compositor and its controllers run as, and no composition is installed there; create it in another namespace",
		c.namespace))}, nil
}
