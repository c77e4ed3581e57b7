package app

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"

	"github.com/compositor-dev/compositor/generators/crd"
	"github.com/compositor-dev/compositor/test/chartserver"
	"github.com/compositor-dev/compositor/test/samplecharts"
)

// runCLI runs `compositor args...` as main does and returns what it printed.
func runCLI(t *testing.T, stdin string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var out, errOut bytes.Buffer
	cmd := NewCommand()
	cmd.SetArgs(args)
	cmd.SetIn(strings.NewReader(stdin))
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	err = cmd.ExecuteContext(context.Background())
	return out.String(), errOut.String(), err
}

// sampleDir is the directory of a fireworks-app version (1.1.6 has none of its own).
func sampleDir(t *testing.T, version string) string {
	t.Helper()
	dir, err := samplecharts.Dir(version)
	require.NoError(t, err)
	return dir
}

// sampleRepo serves every packaged fireworks-app version as a Helm repository on
// loopback and returns its URL.
func sampleRepo(t *testing.T) *chartserver.Repository {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, samplecharts.Package(dir))
	return chartserver.NewRepository(t, chartserver.RepositoryOptions{Dir: dir})
}

// writeChart writes a chart into a temporary directory: files maps paths to contents.
func writeChart(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
	}
	return dir
}

const lossySchema = `{
  "type": "object",
  "properties": {
    "replicas": {"type": "integer"},
    "auth": {"oneOf": [
      {"properties": {"token": {"type": "string"}}, "required": ["token"]},
      {"properties": {"user": {"type": "string"}}, "required": ["user"]}
    ]}
  }
}`

func TestCRDPrintsWhatTheReconcilerGenerates(t *testing.T) {
	stdout, stderr, err := runCLI(t, "", "crd", sampleDir(t, "1.1.5"))
	require.NoError(t, err)
	assert.Equal(t, "cache: condition: subchart cache is enabled by condition \"cache.enabled\": Helm validates its values only when it is enabled, so its schema (and its subcharts') is enforced by the webhook only\n",
		stderr, "fireworks-app 1.1.5 loses only its conditional subchart's constraints to the webhook")
	var manifest map[string]any
	require.NoError(t, yaml.Unmarshal([]byte(stdout), &manifest))
	assert.NotContains(t, manifest, "status", "a manifest to apply, without status")
	assert.Equal(t, map[string]any{"name": "fireworksapps.composition.krateo.io", "annotations": map[string]any{
		"conversions.compositor.dev/v1-1-5": `{"chart":"1.1.5"}`, // what the version declares about conversion
	}}, manifest["metadata"])

	got := &apiextensionsv1.CustomResourceDefinition{}
	require.NoError(t, yaml.UnmarshalStrict([]byte(stdout), got))
	ch, err := samplecharts.Load("1.1.5")
	require.NoError(t, err)
	want, _, err := crd.ForChart(ch, crd.ConversionWebhook{URL: DefaultConversionURL})
	require.NoError(t, err)
	assert.Equal(t, want.Spec, got.Spec)
	assert.Equal(t, "fireworksapps.composition.krateo.io", got.Name)
	assert.Equal(t, "https://compositor-webhook.compositor-system.svc/convert", *got.Spec.Conversion.Webhook.ClientConfig.URL)
	require.NoError(t, crd.Validate(got), "the printed CRD passes the API server's validation")
}

func TestCRDFromRepositoryAsJSON(t *testing.T) {
	repo := sampleRepo(t)
	stdout, _, err := runCLI(t, "", "crd", repo.URL, "--repo", samplecharts.ChartName, "--version", "2.0.0",
		"--chart-cache-dir", t.TempDir(), "-o", "json", "--conversion-url", "https://webhook.example.com/convert")
	require.NoError(t, err)
	got := &apiextensionsv1.CustomResourceDefinition{}
	require.NoError(t, json.Unmarshal([]byte(stdout), got))
	assert.Equal(t, "https://webhook.example.com/convert", *got.Spec.Conversion.Webhook.ClientConfig.URL)
	var served []string
	for _, v := range got.Spec.Versions {
		if v.Served {
			served = append(served, v.Name)
		}
	}
	assert.Equal(t, []string{"v2-0-0"}, served)
	assert.Equal(t, "FireworksApp", got.Spec.Names.Kind)
}

func TestCRDReportsLossesOnStderr(t *testing.T) {
	dir := writeChart(t, map[string]string{
		"Chart.yaml":         "apiVersion: v2\nname: lossy-app\nversion: 0.3.0\n",
		"values.yaml":        "replicas: 1\n",
		"values.schema.json": lossySchema,
	})
	stdout, stderr, err := runCLI(t, "", "crd", dir)
	require.NoError(t, err)
	assert.Contains(t, stdout, "name: lossyapps.composition.krateo.io")

	_, report, err := crd.Translate([]byte(lossySchema), []byte("replicas: 1\n"))
	require.NoError(t, err)
	require.NotEmpty(t, report)
	assert.Equal(t, report.String(), stderr, "one line per loss: path, keyword, reason")
	assert.Contains(t, stderr, "auth.token: oneOf: ")
}

func TestCRDUsageErrors(t *testing.T) {
	_, stderr, err := runCLI(t, "", "crd")
	require.ErrorIs(t, err, ErrUsage)
	assert.Equal(t, ExitUsage, ExitCode(err))
	assert.Contains(t, stderr, "missing argument REF|DIR")

	_, _, err = runCLI(t, "", "crd", sampleDir(t, "1.1.5"), "-o", "xml")
	require.ErrorIs(t, err, ErrUsage)

	_, _, err = runCLI(t, "", "crd", sampleDir(t, "1.1.5"), "--no-such-flag")
	require.ErrorIs(t, err, ErrUsage)

	_, _, err = runCLI(t, "", "crd", sampleDir(t, "1.1.5"), "--version", "1.1.5")
	require.ErrorIs(t, err, ErrUsage, "--version is for chart URLs")

	_, _, err = runCLI(t, "", "crd", filepath.Join(t.TempDir(), "nothing"))
	require.Error(t, err)
	assert.Equal(t, ExitFailure, ExitCode(err))
}

func TestLintSampleCharts(t *testing.T) {
	for _, v := range []string{"1.1.5", "2.0.0"} {
		t.Run(v, func(t *testing.T) {
			stdout, _, err := runCLI(t, "", "lint", sampleDir(t, v))
			require.NoError(t, err, stdout)
			assert.NotContains(t, stdout, "[ERROR]")
			assert.NotContains(t, stdout, "[WARNING]")
			version, err := crd.VersionName(v)
			require.NoError(t, err)
			assert.Contains(t, stdout, "[INFO] Chart.yaml: API composition.krateo.io/"+version+", kind FireworksApp, resource fireworksapps.composition.krateo.io\n")
			assert.Contains(t, stdout, "[INFO] templates: RBAC in each composition namespace: create, delete, get, list, patch, update, watch on deployments.apps\n")
			assert.Contains(t, stdout, "0 error(s), 0 warning(s)\n")
		})
	}
	stdout, _, err := runCLI(t, "", "lint", sampleDir(t, "2.0.0"))
	require.NoError(t, err)
	assert.Contains(t, stdout, "on ingresses.networking.k8s.io", "2.0.0 renders an Ingress when public")
}

func TestLintFromRepository(t *testing.T) {
	repo := sampleRepo(t)
	stdout, _, err := runCLI(t, "", "lint", repo.URL, "--repo", samplecharts.ChartName, "--version", "1.1.6", "--chart-cache-dir", t.TempDir())
	require.NoError(t, err)
	assert.Contains(t, stdout, "==> Linting fireworks-app 1.1.6\n")
	assert.Contains(t, stdout, "API composition.krateo.io/v1-1-6")
}

const configMapTemplate = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}\n"

func TestLintBrokenSchema(t *testing.T) {
	dir := writeChart(t, map[string]string{
		"Chart.yaml":              "apiVersion: v2\nname: broken-app\nversion: 0.1.0\n",
		"values.yaml":             "replicas: 1\n",
		"values.schema.json":      `{"type": "object", "properties": {"replicas": {"type": "integr"}}}`,
		"templates/configmap.yml": configMapTemplate,
	})
	stdout, _, err := runCLI(t, "", "lint", dir)
	require.ErrorIs(t, err, ErrLint)
	assert.Equal(t, ExitFailure, ExitCode(err))
	assert.Contains(t, stdout, "[ERROR] values.schema.json: values.schema.json does not compile: ")
	assert.Contains(t, stdout, "1 error(s), 0 warning(s)\n")
}

func TestLintPrevious(t *testing.T) {
	stdout, _, err := runCLI(t, "", "lint", sampleDir(t, "2.0.0"), "--previous", sampleDir(t, "1.1.5"))
	require.NoError(t, err, stdout)
	assert.Contains(t, stdout, "==> Linting fireworks-app 2.0.0, from 1.1.5\n")
	assert.Contains(t, stdout, `[INFO] values.conversions.yaml: step 1.1.6 → 2.0.0 loses service.type, e.g. service.type: "NodePort" comes back as "LoadBalancer" (v1-1-5 → v2-0-0 → v1-1-5); reason: `)
	assert.NotContains(t, stdout, "[ERROR]")
	assert.NotContains(t, stdout, "[WARNING]")
	assert.Contains(t, stdout, "0 error(s), 0 warning(s)\n")
}

func TestLintPreviousUndeclaredRename(t *testing.T) {
	// 2.0.0 without its values.conversions.yaml.
	src := sampleDir(t, "2.0.0")
	files := map[string]string{}
	require.NoError(t, filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() == crd.ConversionsFile {
			return err
		}
		b, err := os.ReadFile(p)
		rel, _ := filepath.Rel(src, p)
		files[filepath.ToSlash(rel)] = string(b)
		return err
	}))
	stdout, _, err := runCLI(t, "", "lint", writeChart(t, files), "--previous", sampleDir(t, "1.1.5"))
	require.NoError(t, err, "warnings alone pass: %s", stdout)
	assert.Contains(t, stdout, "[WARNING] values.conversions.yaml: 1.1.5 → 2.0.0: removed: service.type; added: exposure. ")
	assert.Contains(t, stdout, "0 error(s), 1 warning(s)\n")
}

func TestLintPreviousFromRepository(t *testing.T) {
	repo := sampleRepo(t)
	stdout, _, err := runCLI(t, "", "lint", sampleDir(t, "2.0.0"),
		"--previous", repo.URL, "--repo", samplecharts.ChartName, "--previous-version", "1.1.6", "--chart-cache-dir", t.TempDir())
	require.NoError(t, err, stdout)
	assert.Contains(t, stdout, "==> Linting fireworks-app 2.0.0, from 1.1.6\n")
	assert.Contains(t, stdout, `loses service.type, e.g. service.type: "NodePort" comes back as "LoadBalancer" (v1-1-6 → v2-0-0 → v1-1-6)`)
}

func TestLintPreviousErrors(t *testing.T) {
	other := writeChart(t, map[string]string{
		"Chart.yaml":              "apiVersion: v2\nname: other-app\nversion: 0.1.0\n",
		"values.schema.json":      `{"type": "object"}`,
		"templates/configmap.yml": configMapTemplate,
	})
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"later version", []string{sampleDir(t, "1.1.5"), "--previous", sampleDir(t, "2.0.0")}, "is not earlier than 1.1.5"},
		{"same version", []string{sampleDir(t, "2.0.0"), "--previous", sampleDir(t, "2.0.0")}, "fireworks-app 2.0.0 is not earlier than 2.0.0"},
		{"another chart", []string{sampleDir(t, "2.0.0"), "--previous", other}, "the earlier chart is other-app, not fireworks-app"},
		{"version of a local chart", []string{sampleDir(t, "2.0.0"), "--previous", sampleDir(t, "1.1.5"), "--previous-version", "1.1.5"}, "--previous-version applies to a chart URL"},
		{"version without previous", []string{sampleDir(t, "2.0.0"), "--previous-version", "1.1.5"}, "--previous-version applies to --previous"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := runCLI(t, "", append([]string{"lint"}, tt.args...)...)
			require.ErrorIs(t, err, ErrUsage)
			assert.Equal(t, ExitUsage, ExitCode(err))
			assert.ErrorContains(t, err, tt.want)
		})
	}
}
