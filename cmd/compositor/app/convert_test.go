package app

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"

	"github.com/compositor-dev/compositor/api/vocab"
	"github.com/compositor-dev/compositor/conversion"
	"github.com/compositor-dev/compositor/conversion/conversiontest"
	"github.com/compositor-dev/compositor/generators/crd"
	"github.com/compositor-dev/compositor/test/samplecharts"
)

// fireworksObject is a FireworksApp demo of version in YAML, with its spec, pinned to
// pin unless pin is empty.
func fireworksObject(t *testing.T, version, pin string, spec map[string]any) string {
	t.Helper()
	obj := conversiontest.FireworksApp(version, spec, nil)
	if pin != "" {
		obj["metadata"].(map[string]any)["labels"] = map[string]any{vocab.LabelCompositionVersion: pin}
	}
	b, err := yaml.Marshal(obj)
	require.NoError(t, err)
	return string(b)
}

// sampleChartFlags are --chart flags for the sample chart directories of versions.
func sampleChartFlags(t *testing.T, versions ...string) []string {
	t.Helper()
	var out []string
	for _, v := range versions {
		out = append(out, "--chart", sampleDir(t, v))
	}
	return out
}

// decodeOutput decodes what convert printed (YAML or JSON) as the webhook decodes
// objects.
func decodeOutput(t *testing.T, stdout string) map[string]any {
	t.Helper()
	j, err := yaml.YAMLToJSON([]byte(stdout))
	require.NoError(t, err)
	obj, err := conversion.Decode(j)
	require.NoError(t, err)
	return obj
}

func runConvert(t *testing.T, stdin string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	return runCLI(t, stdin, append([]string{"convert", "-f", "-"}, args...)...)
}

func TestConvertLoadBalancerBecomesPublic(t *testing.T) {
	in := fireworksObject(t, "v1-1-5", "v1-1-5", map[string]any{"service": map[string]any{"type": "LoadBalancer", "port": 80}})
	stdout, stderr, err := runConvert(t, in, append([]string{"--to", "v2-0-0"}, sampleChartFlags(t, "1.1.5", "2.0.0")...)...)
	require.NoError(t, err)
	assert.Empty(t, stderr, "a pinned object needs no note")

	got := decodeOutput(t, stdout)
	assert.Equal(t, vocab.CompositionGroup+"/v2-0-0", got["apiVersion"])
	assert.Equal(t, "FireworksApp", got["kind"])
	spec := conversiontest.Spec(got)
	assert.Equal(t, "public", spec["exposure"])
	assert.Equal(t, map[string]any{"port": json.Number("80")}, spec["service"], "service.type moved to exposure")
	_, kept := conversiontest.Annotation(got, vocab.AnnotationConversionOrigin)
	assert.False(t, kept, "LoadBalancer comes back from public by itself")
	assert.Equal(t, map[string]any{vocab.LabelCompositionVersion: "v1-1-5"}, got["metadata"].(map[string]any)["labels"])
}

func TestConvertNodePortRoundTrip(t *testing.T) {
	charts := sampleChartFlags(t, "1.1.5", "2.0.0")
	dir := t.TempDir()
	file := filepath.Join(dir, "app.yaml")
	in := fireworksObject(t, "v1-1-5", "v1-1-5", map[string]any{"service": map[string]any{"type": "NodePort", "port": 80}})
	require.NoError(t, os.WriteFile(file, []byte(in), 0o644))

	v2, _, err := runCLI(t, "", append([]string{"convert", "-f", file, "--to", "v2-0-0"}, charts...)...)
	require.NoError(t, err)
	got := decodeOutput(t, v2)
	assert.Equal(t, vocab.CompositionGroup+"/v2-0-0", got["apiVersion"])
	assert.Equal(t, "public", conversiontest.Spec(got)["exposure"])
	assert.NotContains(t, conversiontest.Spec(got)["service"], "type")
	origin, kept := conversiontest.Annotation(got, vocab.AnnotationConversionOrigin)
	require.True(t, kept, "NodePort does not come back from public by itself: it rides in the annotation")
	assert.JSONEq(t, `{"v1-1-5":{"values":{"/service/type":"NodePort"}}}`, origin)

	// The output converted back gives the object again, NodePort and all.
	back, _, err := runConvert(t, v2, append([]string{"--to", "v1-1-5", "-o", "json"}, charts...)...)
	require.NoError(t, err)
	var asJSON map[string]any
	require.NoError(t, json.Unmarshal([]byte(back), &asJSON), "-o json prints JSON")
	assert.Equal(t, decodeOutput(t, in), decodeOutput(t, back))
}

func TestConvertTakesAnUnpinnedObjectAsPinnedToItsVersion(t *testing.T) {
	in := fireworksObject(t, "v1-1-5", "", map[string]any{"service": map[string]any{"type": "NodePort"}})
	stdout, stderr, err := runConvert(t, in, append([]string{"--to", "v2-0-0"}, sampleChartFlags(t, "1.1.5", "2.0.0")...)...)
	require.NoError(t, err)
	assert.Equal(t, "Note: FireworksApp/demo has no krateo.io/composition-version label: taking it as pinned to its own version v1-1-5\n", stderr)
	got := decodeOutput(t, stdout)
	assert.Equal(t, map[string]any{vocab.LabelCompositionVersion: "v1-1-5"}, got["metadata"].(map[string]any)["labels"])
	assert.Equal(t, "public", conversiontest.Spec(got)["exposure"])
}

// convert gives what the API server gets from the conversion webhook, storing the
// object (to the hub) and reading it (from the hub).
func TestConvertMatchesTheWebhook(t *testing.T) {
	fireworks, err := conversiontest.FireworksCRD(crd.ConversionWebhook{URL: "https://127.0.0.1:9443" + crd.ConvertPath})
	require.NoError(t, err)
	schemas, err := conversion.SchemasFromCRD(fireworks)
	require.NoError(t, err)

	// Every sample version, packaged: 1.1.6 has an archive of its own.
	archives := t.TempDir()
	require.NoError(t, samplecharts.Package(archives))
	var all []string
	for _, v := range samplecharts.Versions() {
		all = append(all, "--chart", filepath.Join(archives, samplecharts.ChartName+"-"+v+".tgz"))
	}

	for name, tc := range map[string]struct {
		obj, to string
		charts  []string
	}{
		"LoadBalancer to v2-0-0": {fireworksObject(t, "v1-1-5", "v1-1-5", map[string]any{"service": map[string]any{"type": "LoadBalancer", "port": 80}}), "v2-0-0", all},
		"NodePort to v2-0-0":     {fireworksObject(t, "v1-1-5", "v1-1-5", map[string]any{"service": map[string]any{"type": "NodePort"}, "replicaCount": 3}), "v2-0-0", all},
		"v2-0-0 to v1-1-5":       {fireworksObject(t, "v2-0-0", "v2-0-0", map[string]any{"exposure": "public", "replicaCount": 15}), "v1-1-5", all},
		"v2-0-0 to v1-1-6":       {fireworksObject(t, "v2-0-0", "v2-0-0", map[string]any{"exposure": "internal"}), "v1-1-6", all},
		"chart directories":      {fireworksObject(t, "v1-1-5", "v1-1-5", map[string]any{"service": map[string]any{"type": "NodePort", "port": 8080}}), "v2-0-0", sampleChartFlags(t, "1.1.5", "2.0.0")},
	} {
		t.Run(name, func(t *testing.T) {
			for _, format := range []string{"yaml", "json"} {
				stdout, _, err := runConvert(t, tc.obj, append([]string{"--to", tc.to, "-o", format}, tc.charts...)...)
				require.NoError(t, err)

				want := decodeOutput(t, tc.obj)
				from := want["apiVersion"].(string)[len(vocab.CompositionGroup)+1:]
				require.NoError(t, schemas.Convert(want, from, crd.HubVersion))
				require.NoError(t, schemas.Convert(want, crd.HubVersion, tc.to))
				assert.Equal(t, want, decodeOutput(t, stdout), "-o %s", format)
			}
		})
	}
}

func TestConvertFromRepository(t *testing.T) {
	repo := sampleRepo(t)
	in := fireworksObject(t, "v1-1-5", "v1-1-5", map[string]any{"service": map[string]any{"type": "ClusterIP"}})
	stdout, _, err := runConvert(t, in, "--to", "v2-0-0", "--chart", repo.URL, "--repo", samplecharts.ChartName,
		"--version", "1.1.5", "--version", "2.0.0", "--chart-cache-dir", t.TempDir())
	require.NoError(t, err)
	assert.Equal(t, "internal", conversiontest.Spec(decodeOutput(t, stdout))["exposure"])
}

func TestConvertErrors(t *testing.T) {
	charts := sampleChartFlags(t, "1.1.5", "2.0.0")
	app := fireworksObject(t, "v1-1-5", "v1-1-5", map[string]any{"service": map[string]any{"type": "NodePort"}})
	for name, tc := range map[string]struct {
		stdin string
		args  []string
		usage bool
		want  []string
	}{
		"unknown --to": {app, append([]string{"--to", "v9-9-9"}, charts...), true,
			[]string{`unknown --to version "v9-9-9"`, "the charts give v1-1-5, v2-0-0"}},
		"chart version as --to": {app, append([]string{"--to", "2.0.0"}, charts...), true,
			[]string{`unknown --to version "2.0.0"`, "served as v2-0-0"}},
		"hub as --to": {app, append([]string{"--to", "hub"}, charts...), true,
			[]string{`unknown --to version "hub"`, "storage version"}},
		"missing --to": {app, charts, true,
			[]string{"missing --to VERSION"}},
		"missing --chart": {app, []string{"--to", "v2-0-0"}, true,
			[]string{"missing --chart"}},
		"bad output": {app, append([]string{"--to", "v2-0-0", "-o", "xml"}, charts...), true,
			[]string{`--output must be yaml or json, got "xml"`}},
		"--version of a local chart": {app, append([]string{"--to", "v2-0-0", "--version", "2.0.0"}, charts...), true,
			[]string{"--version applies to chart URLs"}},
		"two charts of one version": {app, append([]string{"--to", "v2-0-0"}, sampleChartFlags(t, "1.1.5", "2.0.0", "2.0.0")...), true,
			[]string{"both give the version v2-0-0"}},
		"malformed YAML": {"apiVersion: [\n", append([]string{"--to", "v2-0-0"}, charts...), false,
			[]string{"stdin: malformed object"}},
		"not an object": {`["a"]`, append([]string{"--to", "v2-0-0"}, charts...), false,
			[]string{"stdin: malformed object: it is an array"}},
		"no object": {"# nothing\n", append([]string{"--to", "v2-0-0"}, charts...), false,
			[]string{"stdin holds no object"}},
		"two objects": {app + "---\n" + app, append([]string{"--to", "v2-0-0"}, charts...), false,
			[]string{"stdin holds 2 documents: convert takes one object"}},
		"metadata not an object": {`{"apiVersion":"composition.krateo.io/v1-1-5","kind":"FireworksApp","metadata":"demo"}`, append([]string{"--to", "v2-0-0"}, charts...), false,
			[]string{"malformed object: metadata is not an object"}},
		"no apiVersion": {"kind: FireworksApp\n", append([]string{"--to", "v2-0-0"}, charts...), false,
			[]string{"the object has no apiVersion"}},
		"not a composition": {"apiVersion: v1\nkind: ConfigMap\n", append([]string{"--to", "v2-0-0"}, charts...), false,
			[]string{"apiVersion v1 is not in the group composition.krateo.io"}},
		"another kind": {"apiVersion: composition.krateo.io/v1-1-5\nkind: OtherApp\nmetadata: {name: x}\n", append([]string{"--to", "v2-0-0"}, charts...), false,
			[]string{"OtherApp/x is a OtherApp, but the charts give the kind FireworksApp"}},
		"version of no chart": {app, append([]string{"--to", "v2-0-0"}, sampleChartFlags(t, "2.0.0")...), false,
			[]string{"FireworksApp/demo is of version v1-1-5, which none of the charts gives (they give v2-0-0)"}},
		"pin of no chart": {fireworksObject(t, "v2-0-0", "v1-1-5", map[string]any{"exposure": "public"}), append([]string{"--to", "v2-0-0"}, sampleChartFlags(t, "2.0.0")...), false,
			[]string{"FireworksApp/demo is pinned to v1-1-5 (label krateo.io/composition-version), which none of the charts gives"}},
	} {
		t.Run(name, func(t *testing.T) {
			stdout, stderr, err := runConvert(t, tc.stdin, tc.args...)
			require.Error(t, err)
			assert.Empty(t, stdout)
			if tc.usage {
				assert.ErrorIs(t, err, ErrUsage)
				assert.Equal(t, ExitUsage, ExitCode(err))
			} else {
				assert.Equal(t, ExitFailure, ExitCode(err))
			}
			for _, want := range tc.want {
				assert.Contains(t, err.Error(), want)
				assert.Contains(t, stderr, want, "cobra prints the error")
			}
		})
	}
}

func TestConvertTakesNoArguments(t *testing.T) {
	_, _, err := runCLI(t, "", "convert", "app.yaml", "--to", "v2-0-0")
	require.ErrorIs(t, err, ErrUsage)
	assert.Contains(t, err.Error(), "the object comes from -f FILE")
}
