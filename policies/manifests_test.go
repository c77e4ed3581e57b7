package policies

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// ParseManifests reads the buffer a Helm post-renderer gets, keeping each object's
// template and the order Helm applies them in.
func TestParseManifests(t *testing.T) {
	objs, err := ParseManifests("---\n# Source: app/templates/cm.yaml\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n" +
		"---\n# Source: app/templates/empty.yaml\n\n" +
		"---\n# Source: app/templates/deploy.yaml\napiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\n")
	require.NoError(t, err)
	require.Len(t, objs, 2)
	assert.Equal(t, "app/templates/cm.yaml", objs[0].Template)
	assert.Equal(t, "ConfigMap/a", objs[0].Ref())
	assert.Equal(t, "app/templates/deploy.yaml", objs[1].Template)
	assert.Equal(t, "Deployment/d", objs[1].Ref())

	_, err = ParseManifests("---\n# Source: app/templates/bad.yaml\nkind: [\n")
	assert.ErrorIs(t, err, ErrRender)
	assert.Contains(t, err.Error(), "app/templates/bad.yaml")
}
