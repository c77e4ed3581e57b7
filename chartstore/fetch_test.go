package chartstore

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	chart "helm.sh/helm/v4/pkg/chart/v2"

	corev1alpha1 "github.com/compositor-dev/compositor/api/core/v1alpha1"
)

// The admission webhooks find a definition's chart in memory; when memory is full, the
// chart used least recently is the one fetched again.
func TestChartsKeepTheRecentlyUsedInMemory(t *testing.T) {
	c := &Source{} // no Fetcher: a miss would panic, so every lookup here must hit
	definitionOf := func(digest string) *corev1alpha1.CompositionDefinition {
		return &corev1alpha1.CompositionDefinition{Status: corev1alpha1.CompositionDefinitionStatus{Digest: digest}}
	}
	charts := map[string]*chart.Chart{}
	for i := range maxLoadedCharts {
		digest := fmt.Sprintf("sha256:%d", i)
		charts[digest] = &chart.Chart{Metadata: &chart.Metadata{Name: digest}}
		c.remember(digest, charts[digest])
	}
	got, digest, err := c.Chart(context.Background(), definitionOf("sha256:0"))
	require.NoError(t, err)
	assert.Same(t, charts["sha256:0"], got)
	assert.Equal(t, "sha256:0", digest)

	c.remember("sha256:new", &chart.Chart{})
	_, ok := c.memory().Get("sha256:1")
	assert.False(t, ok, "the least recently used chart is evicted")
	for _, kept := range []string{"sha256:0", "sha256:2", "sha256:new"} {
		_, ok := c.memory().Get(kept)
		assert.True(t, ok, kept)
	}
}
