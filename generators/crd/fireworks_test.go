package crd

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"

	"github.com/compositor-dev/compositor/test/golden"
	"github.com/compositor-dev/compositor/test/samplecharts"
)

// fireworksVersions translates every sample chart version.
func fireworksVersions(t testing.TB) (map[string]ServedVersion, map[string]Report) {
	t.Helper()
	versions := map[string]ServedVersion{}
	reports := map[string]Report{}
	for _, v := range samplecharts.Versions() {
		ch, err := samplecharts.Load(v)
		require.NoError(t, err)
		spec, report, err := TranslateChart(ch)
		require.NoError(t, err, v)
		versions[v] = ServedVersion{ChartVersion: v, Spec: spec}
		reports[v] = report
	}
	return versions, reports
}

var fireworksWebhook = ConversionWebhook{
	Service:  &apiextensionsv1.ServiceReference{Namespace: "compositor-system", Name: "compositor-webhook"},
	CABundle: testCA,
}

func buildFireworks(t testing.TB, versions ...ServedVersion) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	crd, report, err := Build(BuildOptions{ChartName: samplecharts.ChartName, Versions: versions, Conversion: fireworksWebhook})
	require.NoError(t, err)
	assert.Empty(t, report, "no description had to be dropped")
	return crd
}

func TestGoldenFireworksApp(t *testing.T) {
	versions, reports := fireworksVersions(t)
	var all []ServedVersion
	for _, v := range samplecharts.Versions() {
		all = append(all, versions[v])
		crd := buildFireworks(t, versions[v])
		b, err := yaml.Marshal(crd)
		require.NoError(t, err)
		golden.Check(t, "fireworks-app-"+v+".crd.yaml", b)
		r, err := json.MarshalIndent(reports[v], "", "  ")
		require.NoError(t, err)
		golden.Check(t, "fireworks-app-"+v+".report.json", append(r, '\n'))
	}
	b, err := yaml.Marshal(buildFireworks(t, all...))
	require.NoError(t, err)
	golden.Check(t, "fireworks-app.crd.yaml", b)
}

// The rules the sample chart exercises, asserted one by one (the golden files show
// them too).
func TestFireworksAppRules(t *testing.T) {
	versions, reports := fireworksVersions(t)
	// The one loss: cache is enabled by a condition, so its schema is the webhook's
	// (Helm does not validate a disabled subchart).
	for _, v := range samplecharts.Versions() {
		require.Len(t, reports[v], 1, "fireworks-app %s: %s", v, reports[v])
		assert.Equal(t, Loss{Path: "cache", Keyword: "condition", SchemaPath: "charts/cache/values.schema.json#",
			Reason: `subchart cache is enabled by condition "cache.enabled": Helm validates its values only when it is enabled, so its schema (and its subcharts') is enforced by the webhook only`},
			reports[v][0], v)
	}
	spec := versions["1.1.5"].Spec

	// required: [service] is dropped, service has a default in values.yaml.
	assert.NotContains(t, spec.Required, "service")
	assert.True(t, prop(t, spec, "service").Nullable)

	// $ref: service.port is #/$defs/port inlined, without its default.
	port := prop(t, spec, "service", "port")
	assert.Equal(t, "integer", port.Type)
	assert.Equal(t, 1.0, *port.Minimum)
	assert.Equal(t, 65535.0, *port.Maximum)
	assert.Nil(t, port.Default)

	// oneOf [null, object]: a nullable object, the branch's rules in the parent.
	storage := prop(t, spec, "storage")
	assert.Equal(t, "object", storage.Type)
	assert.True(t, storage.Nullable)
	assert.Equal(t, []string{"size"}, storage.Required)
	assert.Equal(t, "^[0-9]+Gi$", prop(t, &storage, "size").Pattern)
	assert.Empty(t, storage.OneOf)

	// Subchart with a condition: any object under its key (Helm refuses anything else
	// there, enabled or not), none of its own constraints.
	cache := prop(t, spec, "cache")
	assert.Equal(t, "object", cache.Type)
	assert.True(t, cache.Nullable)
	assert.True(t, *cache.XPreserveUnknownFields)
	assert.Empty(t, cache.Properties)

	// Extra keys allowed at the root.
	assert.True(t, *spec.XPreserveUnknownFields)

	// 2.0.0: service.type gone, exposure added, replicaCount up to 20.
	spec2 := versions["2.0.0"].Spec
	assert.NotContains(t, prop(t, spec2, "service").Properties, "type")
	assert.Equal(t, []string{`"internal"`, `"public"`}, enumOf(t, prop(t, spec2, "exposure")))
	assert.Equal(t, 20.0, *prop(t, spec2, "replicaCount").Maximum)

	// 1.1.6 is 1.1.5.
	assert.Equal(t, mustJSON(versions["1.1.5"].Spec), mustJSON(versions["1.1.6"].Spec))
}

func TestFireworksAppCRD(t *testing.T) {
	versions, _ := fireworksVersions(t)
	crd := buildFireworks(t, versions["2.0.0"], versions["1.1.5"], versions["1.1.6"])
	assert.Equal(t, "fireworksapps.composition.krateo.io", crd.Name)
	assert.Equal(t, apiextensionsv1.NamespaceScoped, crd.Spec.Scope)
	assert.Equal(t, "FireworksApp", crd.Spec.Names.Kind)
	assert.Equal(t, []string{"compositions"}, crd.Spec.Names.Categories)

	var names []string
	for _, v := range crd.Spec.Versions {
		names = append(names, v.Name)
		if v.Name == HubVersion {
			assert.False(t, v.Served)
			assert.True(t, v.Storage)
			assert.True(t, *v.Schema.OpenAPIV3Schema.XPreserveUnknownFields)
			continue
		}
		assert.True(t, v.Served)
		assert.False(t, v.Storage)
		require.NotNil(t, v.Subresources.Status)
		var columns []string
		for _, c := range v.AdditionalPrinterColumns {
			columns = append(columns, c.Name)
		}
		assert.Equal(t, []string{"READY", "HEALTHY", "CHART VERSION", "RELEASE", "AGE"}, columns)
		status := v.Schema.OpenAPIV3Schema.Properties["status"]
		assert.True(t, *status.XPreserveUnknownFields)
		for _, k := range []string{"conditions", "helmChartUrl", "helmChartVersion", "releaseName", "digest", "observedGeneration"} {
			assert.Contains(t, status.Properties, k)
		}
	}
	assert.Equal(t, []string{"v1-1-5", "v1-1-6", "v2-0-0", "hub"}, names, "oldest first, hub last")

	conv := crd.Spec.Conversion
	assert.Equal(t, apiextensionsv1.WebhookConverter, conv.Strategy)
	assert.Equal(t, []string{"v1"}, conv.Webhook.ConversionReviewVersions)
	assert.Equal(t, ConvertPath, *conv.Webhook.ClientConfig.Service.Path)
	assert.Equal(t, fireworksWebhook.CABundle, conv.Webhook.ClientConfig.CABundle)
}

// webhookOnlyExamples are the invalid examples whose violation only the webhook sees,
// with the loss of the report that says why.
var webhookOnlyExamples = map[string]string{
	"invalid-cache-memory.yaml": "cache: condition", // the cache subchart has a condition
}

// Every valid example values file is admitted unchanged by its version of the CRD;
// every invalid one is refused by the CRD already, except those whose violation the
// report lists as the webhook's.
func TestFireworksAppExamples(t *testing.T) {
	versions, reports := fireworksVersions(t)
	for _, v := range samplecharts.Versions() {
		crd := buildFireworks(t, versions[v])
		name, err := VersionName(v)
		require.NoError(t, err)
		a := newAdmitter(t, crd, name)
		examples, err := samplecharts.Examples(v)
		require.NoError(t, err)
		require.NotEmpty(t, examples)
		for _, ex := range examples {
			var values map[string]any
			require.NoError(t, yaml.Unmarshal(ex.Values, &values), ex.Name)
			if values == nil {
				values = map[string]any{}
			}
			err := a.admit(values)
			switch loss, webhookOnly := webhookOnlyExamples[ex.Name]; {
			case ex.Valid:
				assert.NoError(t, err, "%s %s", v, ex.Name)
			case webhookOnly:
				assert.NoError(t, err, "%s %s: the CRD leaves it to the webhook", v, ex.Name)
				assert.Contains(t, reports[v].String(), loss, "%s %s: the report says why", v, ex.Name)
			default:
				assert.Error(t, err, "%s %s", v, ex.Name)
			}
		}
	}
}

// A schema full of what a CRD cannot carry: the golden report lists every loss.
func TestGoldenLossy(t *testing.T) {
	schema, err := os.ReadFile(filepath.Join("testdata", "lossy", "values.schema.json"))
	require.NoError(t, err)
	values, err := os.ReadFile(filepath.Join("testdata", "lossy", "values.yaml"))
	require.NoError(t, err)
	spec, report, err := Translate(schema, values)
	require.NoError(t, err)
	_, _, err = Build(BuildOptions{ChartName: "lossy", Versions: []ServedVersion{{ChartVersion: "0.1.0", Spec: spec}}, Conversion: testWebhook})
	require.NoError(t, err)
	b, err := yaml.Marshal(spec)
	require.NoError(t, err)
	golden.Check(t, "lossy.spec.yaml", b)
	r, err := json.MarshalIndent(report, "", "  ")
	require.NoError(t, err)
	golden.Check(t, "lossy.report.json", append(r, '\n'))
	assert.Equal(t, []string{"auth"}, spec.Required, "replicas has a default")
}
