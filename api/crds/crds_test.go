package crds

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestAllDecodesEveryAPI(t *testing.T) {
	crds, err := All()
	require.NoError(t, err)

	names := make([]string, 0, len(crds))
	for _, crd := range crds {
		names = append(names, crd.Name)
		require.Len(t, crd.Spec.Versions, 1, crd.Name)
		v := crd.Spec.Versions[0]
		assert.True(t, v.Served && v.Storage, "%s/%s must be served and stored", crd.Name, v.Name)
		if crd.Spec.Names.Kind == "CompositionRevision" {
			// A record, written whole by the controller: no status.
			assert.True(t, v.Subresources == nil || v.Subresources.Status == nil, crd.Name)
			continue
		}
		assert.NotNil(t, v.Subresources, "%s must have the status subresource", crd.Name)
	}
	assert.Equal(t, []string{"compositiondefinitions.core.krateo.io", "compositionrevisions.core.krateo.io", "compositionpolicies.policy.compositor.dev"}, names)
}
