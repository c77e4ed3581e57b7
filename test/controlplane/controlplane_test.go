package controlplane

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	corev1alpha1 "github.com/compositor-dev/compositor/api/core/v1alpha1"
)

func TestStartServesCompositorAPIs(t *testing.T) {
	cp := Start(t)
	ctx := context.Background()

	res := cp.Kubectl(ctx, "", "get", "crd", "-o", "name")
	require.NoError(t, res.Err, res.Stderr)
	assert.Contains(t, res.Stdout, "customresourcedefinition.apiextensions.k8s.io/compositiondefinitions.core.krateo.io")
	assert.Contains(t, res.Stdout, "customresourcedefinition.apiextensions.k8s.io/compositionpolicies.policy.compositor.dev")

	// The typed client and kubectl see the same API server.
	crd := &apiextensionsv1.CustomResourceDefinition{}
	require.NoError(t, cp.Client.Get(ctx, client.ObjectKey{Name: "compositiondefinitions.core.krateo.io"}, crd))
	list := &corev1alpha1.CompositionDefinitionList{}
	require.NoError(t, cp.Client.List(ctx, list))
	assert.Empty(t, list.Items)

	// The API server reports its release's version, as a cluster does: charts'
	// kubeVersion constraints and semverCompare checks depend on it.
	res = cp.Kubectl(ctx, "", "version", "-o", "json")
	require.NoError(t, res.Err, res.Stderr)
	var versions struct {
		Server struct{ GitVersion, Major, Minor string } `json:"serverVersion"`
	}
	require.NoError(t, json.Unmarshal([]byte(res.Stdout), &versions))
	assert.Regexp(t, `^v1\.[0-9]+\.[0-9]+$`, versions.Server.GitVersion)
	assert.Equal(t, "1", versions.Server.Major)
	assert.Equal(t, strings.Split(versions.Server.GitVersion, ".")[1], versions.Server.Minor)

	// kubectl failures come back as errors with kubectl's own message.
	res = cp.Kubectl(ctx, "", "get", "nosuchkind")
	require.Error(t, res.Err)
	assert.Contains(t, res.Stderr, `the server doesn't have a resource type "nosuchkind"`)
}
