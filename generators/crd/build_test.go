package crd

import (
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
)

func simpleSpec(t *testing.T) *apiextensionsv1.JSONSchemaProps {
	t.Helper()
	spec, _, err := Translate([]byte(`{"type":"object","properties":{"a":{"type":"string","description":"`+strings.Repeat("d", 2000)+`"}}}`), nil)
	require.NoError(t, err)
	return spec
}

func TestBuildErrors(t *testing.T) {
	spec := simpleSpec(t)
	ok := BuildOptions{ChartName: "app", Versions: []ServedVersion{{ChartVersion: "1.0.0", Spec: spec}}, Conversion: testWebhook}
	for _, tc := range []struct {
		name   string
		change func(o *BuildOptions)
		err    error
	}{
		{"chart name", func(o *BuildOptions) { o.ChartName = "9lives" }, ErrInvalidChartName},
		{"no versions", func(o *BuildOptions) { o.Versions = nil }, ErrNoVersions},
		{"bad version", func(o *BuildOptions) { o.Versions[0].ChartVersion = "one" }, ErrInvalidChartVersion},
		{"same name twice", func(o *BuildOptions) {
			o.Versions = append(o.Versions, ServedVersion{ChartVersion: "1.0.0+build.2", Spec: spec})
		}, ErrDuplicateVersion},
		{"no webhook", func(o *BuildOptions) { o.Conversion = ConversionWebhook{} }, ErrNoConversionWebhook},
		{"both service and url", func(o *BuildOptions) {
			o.Conversion.Service = &apiextensionsv1.ServiceReference{Namespace: "n", Name: "s"}
		}, ErrNoConversionWebhook},
		{"invalid schema given", func(o *BuildOptions) {
			o.Versions[0].Spec = &apiextensionsv1.JSONSchemaProps{Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{"x": {Type: "null"}}}
		}, ErrInvalidCRD},
		{"too large", func(o *BuildOptions) { o.MaxBytes = 1000 }, ErrTooLarge},
		{"CA bundle not PEM", func(o *BuildOptions) { o.Conversion.CABundle = []byte("not a certificate") }, ErrInvalidCABundle},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := ok
			o.Versions = append([]ServedVersion(nil), ok.Versions...)
			tc.change(&o)
			crd, _, err := Build(o)
			assert.ErrorIs(t, err, tc.err)
			assert.Nil(t, crd, "no CRD with an error")
		})
	}
}

// Descriptions go first from the oldest version, until the CRD fits.
func TestBuildSizeBudget(t *testing.T) {
	spec := simpleSpec(t)
	opts := BuildOptions{ChartName: "app", Conversion: testWebhook, Versions: []ServedVersion{
		{ChartVersion: "2.0.0", Spec: spec}, {ChartVersion: "1.0.0", Spec: spec}}}
	full, report, err := Build(opts)
	require.NoError(t, err)
	assert.Empty(t, report)

	opts.MaxBytes = len(mustJSON(full)) - 1000
	crd, report, err := Build(opts)
	require.NoError(t, err)
	require.Len(t, report, 1)
	assert.Equal(t, "description", report[0].Keyword)
	assert.Contains(t, report[0].Reason, "v1-0-0")
	assert.LessOrEqual(t, len(mustJSON(crd)), opts.MaxBytes)
	desc := func(v int) string {
		return crd.Spec.Versions[v].Schema.OpenAPIV3Schema.Properties["spec"].Properties["a"].Description
	}
	assert.Empty(t, desc(0), "oldest version loses its descriptions")
	assert.NotEmpty(t, desc(1), "newest version keeps them")
	assert.NotEmpty(t, spec.Properties["a"].Description, "the caller's schema is not modified")
}

func TestBuildDefaults(t *testing.T) {
	crd, _, err := Build(BuildOptions{ChartName: "app", Versions: []ServedVersion{{ChartVersion: "1.0.0"}}, Conversion: testWebhook, Group: "example.com", Categories: []string{"all-apps"}})
	require.NoError(t, err)
	assert.Equal(t, "apps.example.com", crd.Name)
	assert.Equal(t, []string{"all-apps"}, crd.Spec.Names.Categories)
	spec := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
	assert.True(t, *spec.XPreserveUnknownFields, "no schema: spec keeps any value")
	assert.Equal(t, "https://compositor.example:9443/convert", *crd.Spec.Conversion.Webhook.ClientConfig.URL)
}

func TestValidate(t *testing.T) {
	crd, _, err := Build(BuildOptions{ChartName: "app", Versions: []ServedVersion{{ChartVersion: "1.0.0", Spec: simpleSpec(t)}}, Conversion: testWebhook})
	require.NoError(t, err)
	require.NoError(t, Validate(crd))

	broken := crd.DeepCopy()
	spec := broken.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
	spec.AnyOf = []apiextensionsv1.JSONSchemaProps{{Type: "string"}} // types are not allowed in branches
	broken.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"] = spec
	err = Validate(broken)
	assert.ErrorIs(t, err, ErrInvalidCRD)
	assert.Contains(t, err.Error(), "must be empty to be structural")

	badCA := crd.DeepCopy()
	badCA.Spec.Conversion.Webhook.ClientConfig.CABundle = []byte("junk")
	assert.ErrorIs(t, Validate(badCA), ErrInvalidCRD)
}

// Merge keeps the other copy's versions it is told to, in chart version order, and
// keeps the whole CRD within the budget.
func TestMerge(t *testing.T) {
	spec := simpleSpec(t)
	build := func(versions ...string) *apiextensionsv1.CustomResourceDefinition {
		t.Helper()
		opts := BuildOptions{ChartName: "app", Conversion: testWebhook}
		for _, v := range versions {
			opts.Versions = append(opts.Versions, ServedVersion{ChartVersion: v, Spec: spec})
		}
		crd, _, err := Build(opts)
		require.NoError(t, err)
		return crd
	}
	names := func(crd *apiextensionsv1.CustomResourceDefinition) []string {
		var out []string
		for _, v := range crd.Spec.Versions {
			out = append(out, v.Name)
		}
		return out
	}
	description := func(crd *apiextensionsv1.CustomResourceDefinition, name string) string {
		for _, v := range crd.Spec.Versions {
			if v.Name == name {
				return v.Schema.OpenAPIV3Schema.Properties["spec"].Properties["a"].Description
			}
		}
		t.Fatalf("no version %s", name)
		return ""
	}
	cluster := build("1.9.0", "2.0.0", "1.0.0-rc.1", "1.10.0")
	// The cluster's copy of the merged version differs: the built one wins.
	for i := range cluster.Spec.Versions {
		if cluster.Spec.Versions[i].Name == "v1-10-0" {
			cluster.Spec.Versions[i].Deprecated = true
		}
	}
	notV2 := func(name string) bool { return name != "v2-0-0" }

	t.Run("versions kept in chart version order", func(t *testing.T) {
		merged := build("1.10.0")
		report, err := Merge(merged, cluster.Spec.Versions, notV2, 0)
		require.NoError(t, err)
		assert.Empty(t, report)
		assert.Equal(t, []string{"v1-0-0-rc-1", "v1-9-0", "v1-10-0", "hub"}, names(merged))
		assert.False(t, merged.Spec.Versions[2].Deprecated, "the built version wins over the cluster's copy")
	})

	t.Run("the whole CRD fits the budget, oldest descriptions dropped first", func(t *testing.T) {
		full := build("1.10.0")
		_, err := Merge(full, cluster.Spec.Versions, notV2, 0)
		require.NoError(t, err)
		budget := len(mustJSON(full)) - 1000

		merged := build("1.10.0")
		report, err := Merge(merged, cluster.Spec.Versions, notV2, budget)
		require.NoError(t, err)
		require.Len(t, report, 1)
		assert.Contains(t, report[0].Reason, "v1-0-0-rc-1")
		assert.LessOrEqual(t, len(mustJSON(merged)), budget)
		assert.Empty(t, description(merged, "v1-0-0-rc-1"))
		assert.NotEmpty(t, description(merged, "v1-9-0"))
		assert.NotEmpty(t, description(merged, "v1-10-0"))
		assert.NotEmpty(t, description(cluster, "v1-0-0-rc-1"), "the other copy is not modified")
	})

	t.Run("too large even without descriptions", func(t *testing.T) {
		_, err := Merge(build("1.10.0"), cluster.Spec.Versions, notV2, 2000)
		assert.ErrorIs(t, err, ErrTooLarge)
	})
}

func TestVersionLess(t *testing.T) {
	in := []string{"hub", "v2-0-0", "zeta", "v1-10-0", "v1-2-0", "v1-2-0-rc-1", "v1-2-0-alpha"}
	sort.SliceStable(in, func(i, j int) bool { return versionLess(in[i], in[j]) })
	assert.Equal(t, []string{"v1-2-0-alpha", "v1-2-0-rc-1", "v1-2-0", "v1-10-0", "v2-0-0", "zeta", "hub"}, in)
}
