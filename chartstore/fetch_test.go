package chartstore

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	corev1alpha1 "github.com/compositor-dev/compositor/api/core/v1alpha1"
	"github.com/compositor-dev/compositor/api/vocab"
	"github.com/compositor-dev/compositor/chartfetch"
	"github.com/compositor-dev/compositor/internal/condition"
	"github.com/compositor-dev/compositor/test/chartserver"
	"github.com/compositor-dev/compositor/test/samplecharts"
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

// movedOn is a definition that moved from chart 1.1.5 (digest retained, retained) to
// 2.0.0 (digest current) of the sample chart served by a repository at url, its spec
// back on specVersion.
func movedOn(url, specVersion, current, retained string) *corev1alpha1.CompositionDefinition {
	return &corev1alpha1.CompositionDefinition{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-s", Name: "fireworks"},
		Spec:       corev1alpha1.CompositionDefinitionSpec{Chart: corev1alpha1.ChartInfo{URL: url, Repo: samplecharts.ChartName, Version: specVersion}},
		Status: corev1alpha1.CompositionDefinitionStatus{
			Kind: "FireworksApp", APIVersion: "composition.krateo.io/v2-0-0",
			Digest: current, PackageURL: url + "/fireworks-app-2.0.0.tgz",
			Retained: []corev1alpha1.ServedChart{{
				APIVersion: "composition.krateo.io/v1-1-5", Chart: "1.1.5", Digest: retained, PackageURL: url + "/fireworks-app-1.1.5.tgz",
			}},
			Managed: corev1alpha1.Managed{VersionInfo: []corev1alpha1.VersionInfo{
				{Version: "v2-0-0", Served: true, Chart: "2.0.0"},
				{Version: "v1-1-5", Served: true, Chart: "1.1.5"},
				{Version: "vhub", Stored: true},
			}},
		},
	}
}

// A definition that moved on to 2.0.0 and retains 1.1.5 may move its spec back to
// 1.1.5: that version's content is pinned by the retained digest, not the status's.
// The same content is accepted; other content under 1.1.5 is refused, naming the
// retained digest it was recorded as.
func TestMovingBackToARetainedVersionIsPinnedByItsDigest(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, samplecharts.Package(dir))
	origin := chartserver.NewRepository(t, chartserver.RepositoryOptions{Dir: dir})
	fetcher, err := chartfetch.New(chartfetch.Options{AllowNetworks: chartfetch.LoopbackNetworks()})
	require.NoError(t, err)
	source := &Source{Fetcher: fetcher}
	ctx := context.Background()
	fetchedAt := func(version string) *chartfetch.Result {
		t.Helper()
		res, err := source.Fetch(ctx, &corev1alpha1.CompositionDefinition{Spec: corev1alpha1.CompositionDefinitionSpec{Chart: corev1alpha1.ChartInfo{URL: origin.URL, Repo: samplecharts.ChartName, Version: version}}})
		require.NoError(t, err)
		return res
	}
	old, current := fetchedAt("1.1.5"), fetchedAt("2.0.0")
	require.NotEqual(t, old.Digest, current.Digest)

	back := movedOn(origin.URL, "1.1.5", current.Digest, old.Digest)
	got, err := source.Fetch(ctx, back)
	require.NoError(t, err, "the retained version's own content")
	assert.Equal(t, old.Digest, got.Digest)
	assert.Equal(t, "1.1.5", got.Chart.Metadata.Version)

	const recorded = "sha256:00000000000000000000000000000000000000000000000000000000000000aa"
	changed := movedOn(origin.URL, "1.1.5", current.Digest, recorded)
	_, err = source.Fetch(ctx, changed)
	require.ErrorIs(t, err, ErrChartChanged)
	assert.Contains(t, err.Error(), "chart fireworks-app 1.1.5 was recorded as "+recorded+" and is now "+old.Digest)
	var ce *condition.Error
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, ReasonChartChanged, ce.Reason)
	assert.True(t, ce.Terminal)
	changed.Annotations = map[string]string{vocab.AnnotationAcceptChartDigest: old.Digest}
	_, err = source.Fetch(ctx, changed)
	assert.NoError(t, err, "accepted by a person")

	// The version the status serves is still pinned by the status's digest.
	_, err = source.Fetch(ctx, movedOn(origin.URL, "2.0.0", recorded, old.Digest))
	assert.ErrorIs(t, err, ErrChartChanged)
	_, err = source.Fetch(ctx, movedOn(origin.URL, "2.0.0", current.Digest, recorded))
	assert.NoError(t, err)
	// A chart version it serves no chart of records its first digest.
	_, err = source.Fetch(ctx, movedOn(origin.URL, "1.1.6", recorded, recorded))
	assert.NoError(t, err)
}

// While the chart source is down, a definition whose spec names a version it retains
// goes on with that version's kept chart, digest and package URL, not the status's.
func TestKeptChartOfARetainedSpecVersion(t *testing.T) {
	c := &Source{} // no Fetcher and no Store: only memory
	oldChart := &chart.Chart{Metadata: &chart.Metadata{Name: "fireworks-app", Version: "1.1.5"}}
	newChart := &chart.Chart{Metadata: &chart.Metadata{Name: "fireworks-app", Version: "2.0.0"}}
	c.remember("sha256:old", oldChart)
	c.remember("sha256:new", newChart)
	ctx := context.Background()

	kept, err := c.Kept(ctx, movedOn("https://charts.example", "1.1.5", "sha256:new", "sha256:old"))
	require.NoError(t, err)
	assert.Same(t, oldChart, kept.Chart)
	assert.Equal(t, "sha256:old", kept.Digest)
	assert.Equal(t, "https://charts.example/fireworks-app-1.1.5.tgz", kept.PackageURL)
	assert.True(t, kept.FromCache)

	kept, err = c.Kept(ctx, movedOn("https://charts.example", "2.0.0", "sha256:new", "sha256:old"))
	require.NoError(t, err)
	assert.Same(t, newChart, kept.Chart)
	assert.Equal(t, "https://charts.example/fireworks-app-2.0.0.tgz", kept.PackageURL)

	_, err = c.Kept(ctx, movedOn("https://charts.example", "1.1.6", "sha256:new", "sha256:old"))
	assert.ErrorIs(t, err, ErrNotStored, "a chart version it serves no chart of waits for the source")
}
