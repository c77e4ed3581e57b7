package policies

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	chart "helm.sh/helm/v4/pkg/chart/v2"

	"github.com/compositor-dev/compositor/test/samplecharts"
)

// dependencyChart is a chart whose dependencies are enabled in every way Helm knows:
// conditions (several, one through globals), tags, an alias of a subchart also used
// under its own name, a nested subchart with a condition of its own and import-values.
func dependencyChart() *chart.Chart {
	leaf := func(name string, values map[string]any, deps ...*chart.Chart) *chart.Chart {
		c := &chart.Chart{Metadata: &chart.Metadata{APIVersion: chart.APIVersionV2, Name: name, Version: "1.0.0"}, Values: values}
		c.SetDependencies(deps...)
		return c
	}
	exporter := leaf("exporter", map[string]any{"port": int64(9100)})
	metrics := leaf("metrics", map[string]any{"exporter": map[string]any{"enabled": false}, "exports": map[string]any{"data": map[string]any{"interval": "30s"}}}, exporter)
	metrics.Metadata.Dependencies = []*chart.Dependency{{Name: "exporter", Version: "1.0.0", Condition: "exporter.enabled"}}
	root := leaf("app", map[string]any{
		"db":      map[string]any{"enabled": false},
		"redis":   map[string]any{"enabled": true},
		"tags":    map[string]any{"backend": true},
		"global":  map[string]any{"team": "a"},
		"metrics": map[string]any{},
	},
		leaf("db", map[string]any{"size": "1Gi"}),
		leaf("cache", map[string]any{"memory": "64Mi"}),
		metrics,
		leaf("tagged", map[string]any{"x": int64(1)}),
	)
	root.Metadata.Dependencies = []*chart.Dependency{
		{Name: "db", Version: "1.0.0", Condition: "db.enabled,global.dbEnabled"},
		{Name: "cache", Version: "1.0.0", Alias: "redis", Condition: "redis.enabled"},
		{Name: "cache", Version: "1.0.0", Condition: "cache.enabled"},
		{Name: "metrics", Version: "1.0.0", ImportValues: []any{map[string]any{"child": "exports.data", "parent": "metricsDefaults"}}},
		{Name: "tagged", Version: "1.0.0", Tags: []string{"backend"}},
	}
	return root
}

// enabledTree names the subcharts a processed chart keeps, nested.
func enabledTree(c *chart.Chart) string {
	var names []string
	for _, d := range c.Dependencies() {
		names = append(names, d.Name()+"("+enabledTree(d)+")")
	}
	return strings.Join(names, ",")
}

// requireSameAsHelm checks that the kept processed charts give exactly what Helm's own
// processing of a fresh copy gives for spec.
func requireSameAsHelm(t testing.TB, p *processedCharts, ch *chart.Chart, digest string, spec map[string]any) {
	t.Helper()
	wantChart, wantValues, wantErr := helmValues(ch, spec)
	gotChart, gotValues, gotErr := p.values(ch, digest, spec)
	if (wantErr != nil) != (gotErr != nil) {
		t.Fatalf("spec %v: Helm's error %v, kept chart's error %v", spec, wantErr, gotErr)
	}
	if wantErr != nil {
		return
	}
	if w, g := enabledTree(wantChart), enabledTree(gotChart); w != g {
		t.Fatalf("spec %v: Helm enables %s, the kept chart %s", spec, w, g)
	}
	if !reflect.DeepEqual(map[string]any(wantValues), map[string]any(gotValues)) {
		t.Fatalf("spec %v: values differ\nHelm: %v\nkept: %v", spec, wantValues, gotValues)
	}
	if !reflect.DeepEqual(wantChart.Values, gotChart.Values) {
		t.Fatalf("spec %v: processed chart values differ\nHelm: %v\nkept: %v", spec, wantChart.Values, gotChart.Values)
	}
}

func TestProcessedChartsAgreeWithHelm(t *testing.T) {
	ch := dependencyChart()
	p := newProcessedCharts()
	specs := []string{
		`{}`,
		`{"replicas": 3}`,
		`{"replicas": 4}`,
		`{"db": {"enabled": true}}`,
		`{"db": {"enabled": true, "size": "2Gi"}}`,
		`{"global": {"dbEnabled": true}}`,
		`{"global": {"dbEnabled": true}, "db": {"enabled": false}}`,
		`{"redis": {"enabled": false}}`,
		`{"redis": null}`,
		`{"cache": {"enabled": true}}`,
		`{"tags": {"backend": false}}`,
		`{"tags": null}`,
		`{"metrics": {"exporter": {"enabled": true}}}`,
		`{"metrics": {"exporter": {"enabled": "yes"}}}`,
		`{"metrics": null, "replicas": 1}`,
		`{"db": "not a map"}`,
		`{"metricsDefaults": {"interval": "5s"}}`,
		`{}`,
	}
	for _, raw := range specs {
		spec := map[string]any{}
		require.NoError(t, json.Unmarshal([]byte(raw), &spec))
		requireSameAsHelm(t, p, ch, "sha256:deps", spec)
	}
	// Specs that differ only outside the enabling keys share one processed chart.
	require.LessOrEqual(t, p.cache.Len(), len(specs)-3)
}

func TestProcessedChartsAreNotChanged(t *testing.T) {
	ch := dependencyChart()
	p := newProcessedCharts()
	first, _, err := p.values(ch, "sha256:deps", map[string]any{"a": int64(1)})
	require.NoError(t, err)
	before := enabledTree(first)
	beforeValues, err := json.Marshal(first.Values)
	require.NoError(t, err)
	for i := range 5 {
		_, vals, err := p.values(ch, "sha256:deps", map[string]any{"a": int64(i), "metricsDefaults": map[string]any{"interval": "1s"}})
		require.NoError(t, err)
		vals["metricsDefaults"].(map[string]any)["written"] = true // a caller writing to its values
	}
	again, _, err := p.values(ch, "sha256:deps", map[string]any{"a": int64(9)})
	require.NoError(t, err)
	require.Same(t, first, again)
	require.Equal(t, before, enabledTree(again))
	afterValues, err := json.Marshal(again.Values)
	require.NoError(t, err)
	require.JSONEq(t, string(beforeValues), string(afterValues))
}

// FuzzProcessedChartsAgree: for any two specs processed one after the other (so that
// the second may use what the first kept), the values and enabled subcharts are those
// Helm's own processing gives.
func FuzzProcessedChartsAgree(f *testing.F) {
	sample, err := samplecharts.Load("1.1.5")
	if err != nil {
		f.Fatal(err)
	}
	f.Add([]byte(`{"db": {"enabled": true}}`), []byte(`{"db": {"enabled": true}, "x": 1}`), false)
	f.Add([]byte(`{"tags": {"backend": false}}`), []byte(`{"global": {"dbEnabled": true}}`), false)
	f.Add([]byte(`{"cache": {"enabled": true}}`), []byte(`{"cache": {"enabled": false}, "replicaCount": 2}`), true)
	f.Add([]byte(`{"metrics": {"exporter": {"enabled": true}}}`), []byte(`{"metrics": {"exporter": null}}`), false)
	f.Fuzz(func(t *testing.T, first, second []byte, useSample bool) {
		ch := dependencyChart()
		if useSample {
			ch = sample
		}
		p := newProcessedCharts()
		for _, raw := range [][]byte{first, second} {
			var spec map[string]any
			if json.Unmarshal(raw, &spec) != nil || spec == nil {
				return
			}
			requireSameAsHelm(t, p, ch, "sha256:fuzz", spec)
		}
	})
}
