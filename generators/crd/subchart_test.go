package crd

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	chart "helm.sh/helm/v4/pkg/chart/v2"
)

func subchart(name, schema string, values map[string]any) *chart.Chart {
	return &chart.Chart{
		Metadata: &chart.Metadata{APIVersion: chart.APIVersionV2, Name: name, Version: "0.1.0"},
		Schema:   []byte(schema),
		Values:   values,
	}
}

// parentWith is a chart whose dependencies are deps (Chart.yaml entries) served by subs.
func parentWith(deps []*chart.Dependency, subs ...*chart.Chart) *chart.Chart {
	p := &chart.Chart{
		Metadata: &chart.Metadata{APIVersion: chart.APIVersionV2, Name: "parent", Version: "1.0.0", Dependencies: deps},
		Values:   map[string]any{"global": map[string]any{"registry": "registry.example"}},
	}
	p.SetDependencies(subs...)
	return p
}

const strictSubchart = `{"type":"object","additionalProperties":false,"required":["replicas"],
	"properties":{"enabled":{"type":"boolean"},"replicas":{"type":"integer","minimum":1}}}`

// Helm validates a subchart only when it is enabled: the schema of one with a condition
// or tags is the webhook's, and the report says so. One without either is in the CRD.
func TestSubchartWithAConditionOrTagsIsTheWebhooks(t *testing.T) {
	ch := parentWith([]*chart.Dependency{
		{Name: "alertmanager", Version: "0.1.0", Condition: "alertmanager.enabled"},
		{Name: "metrics", Version: "0.1.0", Tags: []string{"monitoring"}},
		{Name: "db", Version: "0.1.0", Alias: "primary", Condition: "primary.enabled"},
		{Name: "db", Version: "0.1.0", Alias: "replica"},
		{Name: "always", Version: "0.1.0"},
	},
		subchart("alertmanager", strictSubchart, nil),
		subchart("metrics", strictSubchart, nil),
		subchart("db", strictSubchart, nil),
		subchart("always", strictSubchart, nil),
	)
	spec, report, err := TranslateChart(ch)
	require.NoError(t, err)

	for key, keyword := range map[string]string{"alertmanager": "condition", "metrics": "tags", "primary": "condition"} {
		p := prop(t, spec, key)
		assert.Equal(t, "object", p.Type, key)
		assert.True(t, p.Nullable, key)
		assert.True(t, *p.XPreserveUnknownFields, key)
		assert.Empty(t, p.Properties, key)
		assert.Empty(t, p.Required, key)
		assertLoss(t, report, key, keyword)
	}
	for _, key := range []string{"replica", "always"} {
		p := prop(t, spec, key)
		assert.Equal(t, []string{"replicas"}, p.Required, key)
		assert.Equal(t, 1.0, *prop(t, &p, "replicas").Minimum, key)
		assert.False(t, hasLoss(report, key, "condition"), key)
	}

	crd, _, err := Build(BuildOptions{ChartName: "parent", Versions: []ServedVersion{{ChartVersion: "1.0.0", Spec: spec}}, Conversion: testWebhook})
	require.NoError(t, err)
	a := newAdmitter(t, crd, "v1-0-0")
	// Disabled with leftovers Helm never validates: the CRD keeps them for the webhook.
	assert.NoError(t, a.admit(decodeString(t, `{"alertmanager":{"enabled":false,"replicas":0,"replicaCuont":2}}`)))
	assert.NoError(t, a.admit(decodeString(t, `{"tags":{"monitoring":false},"metrics":{"replicas":"many"}}`)))
	assert.NoError(t, a.admit(decodeString(t, `{"primary":{"replicas":0}}`)))
	// Helm refuses anything but a map under a subchart's key, enabled or not.
	assert.Error(t, a.admit(decodeString(t, `{"alertmanager":"off"}`)))
	assert.Error(t, a.admit(decodeString(t, `{"always":{"replicas":0}}`)))
}

// Helm copies the parent's globals over a subchart's own before validating it, so what
// a composition writes under a subchart's global is not what the subchart judges.
func TestSubchartGlobalIsTheWebhooks(t *testing.T) {
	common := subchart("common", `{"type":"object","required":["global"],"properties":{
		"global":{"type":"object","additionalProperties":false,"required":["registry"],"properties":{"registry":{"type":"string","pattern":"^[a-z.]+$"}}},
		"name":{"type":"string"}},
		"allOf":[{"properties":{"global":{"required":["pullSecrets"]}}}]}`, map[string]any{"global": map[string]any{"registry": "docker.io"}})
	plain := subchart("plain", `{"type":"object","properties":{"name":{"type":"string"}}}`, nil)
	ch := parentWith([]*chart.Dependency{{Name: "common", Version: "0.1.0"}, {Name: "plain", Version: "0.1.0"}}, common, plain)
	spec, report, err := TranslateChart(ch)
	require.NoError(t, err)

	c := prop(t, spec, "common")
	g := prop(t, &c, "global")
	assert.Empty(t, g.Type, "any value")
	assert.True(t, *g.XPreserveUnknownFields)
	assert.True(t, g.Nullable)
	assert.NotContains(t, c.Required, "global")
	assert.Equal(t, "string", prop(t, &c, "name").Type, "the rest of the subchart's schema stays")
	assertLoss(t, report, "common.global", "global")
	assert.NotContains(t, prop(t, spec, "plain").Properties, "global", "nothing to free where the subchart says nothing of global")
	assert.False(t, hasLoss(report, "plain.global", "global"))

	crd, _, err := Build(BuildOptions{ChartName: "parent", Versions: []ServedVersion{{ChartVersion: "1.0.0", Spec: spec}}, Conversion: testWebhook})
	require.NoError(t, err)
	a := newAdmitter(t, crd, "v1-0-0")
	assert.NoError(t, a.admit(decodeString(t, `{"common":{"global":{"registry":"Not A Registry","extra":1}}}`)))
	assert.NoError(t, a.admit(decodeString(t, `{"common":{"global":"x"}}`)), "the webhook refuses it, as Helm does")
	assert.Error(t, a.admit(decodeString(t, `{"common":{"name":1}}`)))
}
