package webhooks

import (
	"context"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/compositor-dev/compositor/policies"
	"github.com/compositor-dev/compositor/test/samplecharts"
)

// unreadableNamespaces knows the one definition but cannot read namespaces.
type unreadableNamespaces struct{ oneDefinition }

func (unreadableNamespaces) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	if _, ok := obj.(*corev1.Namespace); ok {
		return apierrors.NewForbidden(schema.GroupResource{Resource: "namespaces"}, key.Name, nil)
	}
	return apierrors.NewNotFound(schema.GroupResource{}, key.Name)
}

// A namespace that cannot be read would leave namespaceSelector policies unmatched:
// the write is refused, saying why, rather than admitted with fewer policies.
func TestUnreadableNamespaceFailsClosed(t *testing.T) {
	ch, err := samplecharts.Load("1.1.5")
	require.NoError(t, err)
	_, validator := newHandlers(Options{
		Cached: unreadableNamespaces{},
		Live:   unreadableNamespaces{},
		Judge:  policies.NewJudge(policies.JudgeOptions{}),
		Charts: fixedChart{chart: ch},
	})
	named := map[string]any{"krateo.io/release-name": "demo", "krateo.io/paused": "false"}
	resp := validator.Handle(context.Background(), admissionRequest(t, compositionRequest("CREATE", composition(named), nil)))
	require.False(t, resp.Allowed)
	assert.Equal(t, int32(http.StatusServiceUnavailable), resp.Result.Code)
	assert.Contains(t, resp.Result.Message, "reading namespace default for the policies' namespaceSelector")
}
