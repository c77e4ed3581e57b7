package policies

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	chartcommon "helm.sh/helm/v4/pkg/chart/common"
	chartvalues "helm.sh/helm/v4/pkg/chart/common/util"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	chartutil "helm.sh/helm/v4/pkg/chart/v2/util"
	"sigs.k8s.io/yaml"

	"github.com/compositor-dev/compositor/generators"
	"github.com/compositor-dev/compositor/test/samplecharts"
)

func loadChart(t testing.TB, version string) *chart.Chart {
	t.Helper()
	ch, err := samplecharts.Load(version)
	require.NoError(t, err)
	return ch
}

func specOf(t testing.TB, y string) map[string]any {
	t.Helper()
	spec := map[string]any{}
	require.NoError(t, yaml.Unmarshal([]byte(y), &spec))
	return spec
}

// TestSchemaSampleExamples: every sample values file Helm accepts is accepted (no false
// rejections), every invalid one is rejected; and the verdict agrees with Helm's own
// validation of the same chart and values.
func TestSchemaSampleExamples(t *testing.T) {
	v := NewJSONSchemaValidator(0)
	for _, version := range samplecharts.Versions() {
		ch := loadChart(t, version)
		examples, err := samplecharts.Examples(version)
		require.NoError(t, err)
		require.NotEmpty(t, examples)
		for _, ex := range examples {
			t.Run(version+"/"+ex.Name, func(t *testing.T) {
				spec := specOf(t, string(ex.Values))
				got, err := v.ValidateValues(context.Background(), ch, "", spec)
				require.NoError(t, err)
				helmErr := helmValidate(t, ch, spec)
				if ex.Valid {
					assert.Empty(t, got, "a valid example is rejected")
					assert.NoError(t, helmErr)
				} else {
					assert.NotEmpty(t, got, "an invalid example is accepted")
					assert.Error(t, helmErr)
				}
			})
		}
	}
}

// helmValidate runs Helm's install-time path: dependencies, coalescing, schema check.
func helmValidate(t *testing.T, ch *chart.Chart, spec map[string]any) error {
	t.Helper()
	c, err := generators.CopyChart(ch)
	require.NoError(t, err)
	require.NoError(t, chartutil.ProcessDependencies(c, spec))
	_, err = chartvalues.ToRenderValues(c, spec, chartcommon.ReleaseOptions{Name: "x", Namespace: "default"}, nil)
	return err
}

func TestSchemaMessages(t *testing.T) {
	v := NewJSONSchemaValidator(0)
	tests := []struct {
		version string
		spec    string
		want    []string
	}{
		{"1.1.5", "replicaCount: 11", []string{"spec.replicaCount: must be <= 10 (values.schema.json)"}},
		{"2.0.0", "replicaCount: 0", []string{"spec.replicaCount: must be >= 1 (values.schema.json)"}},
		{"1.1.5", "replicaCount: two", []string{"spec.replicaCount: must be an integer, not a string (values.schema.json)"}},
		{"1.1.5", "image: {pullPolicy: Sometimes}", []string{"spec.image.pullPolicy: must be one of Always, IfNotPresent, Never (values.schema.json)"}},
		{"1.1.5", "image: {repository: ''}", []string{"spec.image.repository: must be at least 1 character long (values.schema.json)"}},
		{"1.1.5", "service: {port: 0}", []string{"spec.service.port: must be >= 1 (values.schema.json)"}},
		{"1.1.5", "service: {type: Ingress}", []string{"spec.service.type: must be one of ClusterIP, NodePort, LoadBalancer (values.schema.json)"}},
		// inside oneOf: the object branch is the relevant one, not "must be null"
		{"1.1.5", "storage: {size: 10GB}", []string{`spec.storage.size: must match pattern ^[0-9]+Gi$ (values.schema.json)`}},
		{"2.0.0", "storage: {}", []string{"spec.storage.size: is required (values.schema.json)"}},
		{"2.0.0", "storage: 5", []string{"spec.storage: must be null or an object, not an integer (values.schema.json)"}},
		{"2.0.0", "exposure: external", []string{"spec.exposure: must be one of internal, public (values.schema.json)"}},
		// the subchart's schema, under its key, only when the subchart is enabled
		{"1.1.5", "cache: {enabled: true, maxMemory: lots}", []string{`spec.cache.maxMemory: must match pattern ^[0-9]+(Mi|Gi)$ (values.schema.json of subchart cache)`}},
		{"1.1.5", "cache: {enabled: false, maxMemory: lots}", nil},
		{"1.1.5", "cache: {enabled: true, maxMemory: 1}", []string{"spec.cache.maxMemory: must be a string, not an integer (values.schema.json of subchart cache)"}},
		// several at once, in a stable order: root chart first, then subcharts
		{"2.0.0", "replicaCount: 21\ncache: {enabled: true, maxMemory: x}\nstorage: {size: big}\nimage: {pullPolicy: Nope}", []string{
			"spec.image.pullPolicy: must be one of Always, IfNotPresent, Never (values.schema.json)",
			"spec.replicaCount: must be <= 20 (values.schema.json)",
			"spec.storage.size: must match pattern ^[0-9]+Gi$ (values.schema.json)",
			"spec.cache.maxMemory: must match pattern ^[0-9]+(Mi|Gi)$ (values.schema.json of subchart cache)",
		}},
		// a subchart's key must hold an object, as Helm requires
		{"1.1.5", "cache: x", []string{"spec.cache: must be an object: it holds the values of subchart cache, not a string (values.schema.json)"}},
		{"1.1.5", "cache: null", nil},
		// keys with dots are written as [key]
		{"1.1.5", "podAnnotations: {example.com/x: y}", nil},
	}
	for _, tt := range tests {
		t.Run(tt.version+"/"+tt.spec, func(t *testing.T) {
			got, err := v.ValidateValues(context.Background(), loadChart(t, tt.version), "", specOf(t, tt.spec))
			require.NoError(t, err)
			assert.Equal(t, tt.want, FormatLines(got))
		})
	}
}

func TestSchemaCacheCompilesOncePerDigest(t *testing.T) {
	v := NewJSONSchemaValidator(2)
	ch := loadChart(t, "1.1.5")
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got, err := v.ValidateValues(context.Background(), ch, "sha256:a", map[string]any{"replicaCount": float64(i + 5)})
			assert.NoError(t, err)
			assert.Equal(t, i+5 > 10, len(got) == 1)
		}()
	}
	wg.Wait()
	assert.Equal(t, 1, v.Len())
	for _, d := range []string{"sha256:b", "sha256:c", "sha256:d"} {
		_, err := v.ValidateValues(context.Background(), ch, d, nil)
		require.NoError(t, err)
	}
	assert.Equal(t, 2, v.Len(), "the cache is bounded")
}

func TestSchemaRemoteRefRefused(t *testing.T) {
	for _, ref := range []string{"https://example.com/s.json", "http://127.0.0.1:1/s.json", "other.json", "file:///etc/passwd"} {
		t.Run(ref, func(t *testing.T) {
			ch := loadChart(t, "2.0.0")
			ch.Schema = []byte(fmt.Sprintf(`{"type":"object","properties":{"a":{"$ref":%q}}}`, ref))
			_, err := NewJSONSchemaValidator(0).ValidateValues(context.Background(), ch, "", nil)
			require.Error(t, err)
			assert.True(t, errors.Is(err, ErrRemoteRef), "%v", err)
		})
	}
}

func TestSchemaBrokenSchema(t *testing.T) {
	ch := loadChart(t, "2.0.0")
	ch.Schema = []byte(`{"type": "objekt"}`)
	_, err := NewJSONSchemaValidator(0).ValidateValues(context.Background(), ch, "", nil)
	assert.ErrorIs(t, err, ErrSchemaCompile)
}

func TestSchemaDoesNotChangeTheChart(t *testing.T) {
	ch := loadChart(t, "1.1.5")
	before := len(ch.Dependencies())
	_, err := NewJSONSchemaValidator(0).ValidateValues(context.Background(), ch, "", map[string]any{"cache": map[string]any{"enabled": false}})
	require.NoError(t, err)
	assert.Equal(t, before, len(ch.Dependencies()), "the disabled subchart is dropped from a copy only")
	assert.Equal(t, false, ch.Metadata.Dependencies[0].Enabled)
}

func TestSchemaPathsAndKeywords(t *testing.T) {
	ch := loadChart(t, "2.0.0")
	ch.Schema = []byte(`{
		"type": "object",
		"properties": {
			"podAnnotations": {"type": "object", "additionalProperties": {"type": "string"}},
			"hosts": {"type": "array", "maxItems": 3, "items": {"type": "object", "required": ["name"], "additionalProperties": false,
				"properties": {"name": {"type": "string", "format": "hostname"}, "weight": {"type": "number", "exclusiveMinimum": 0, "multipleOf": 0.5}}}},
			"mode": {"const": "fast"},
			"tier": {"anyOf": [{"type": "string", "maxLength": 3}, {"type": "integer", "minimum": 5}]}
		}
	}`)
	got, err := NewJSONSchemaValidator(0).ValidateValues(context.Background(), ch, "", specOf(t, `
podAnnotations: {example.com/team: 1}
hosts:
  - {name: a, weight: 0}
  - {weight: 0.7, port: 80}
mode: slow
tier: four
`))
	require.NoError(t, err)
	assert.Equal(t, []string{
		"spec.hosts[0].weight: must be > 0 (values.schema.json)",
		"spec.hosts[1].name: is required (values.schema.json)",
		"spec.hosts[1].port: is not allowed: the schema has no such field (values.schema.json)",
		"spec.hosts[1].weight: must be a multiple of 0.5 (values.schema.json)",
		"spec.mode: must be fast (values.schema.json)",
		"spec.podAnnotations[example.com/team]: must be a string, not an integer (values.schema.json)",
		"spec.tier: must be at most 3 characters long (values.schema.json)",
	}, FormatLines(got))
}
