package chartlint

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"helm.sh/helm/v4/pkg/chart/common"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/compositor-dev/compositor/generators/crd"
	"github.com/compositor-dev/compositor/test/samplecharts"
)

const configMapTemplate = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}\n"

// lossySchema holds what a CRD cannot express: a oneOf.
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

// writeChart writes files (path -> content) as a chart directory and returns it.
func writeChart(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		path := filepath.Join(dir, filepath.FromSlash(name))
		require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
		require.NoError(t, os.WriteFile(path, []byte(content), 0o644))
	}
	return dir
}

func TestFindings(t *testing.T) {
	tests := []struct {
		name  string
		files map[string]string
		want  []Finding // each must be among the findings, message as a prefix
		clean bool      // no error
	}{{
		name: "subchart schema that is not JSON",
		files: map[string]string{
			"Chart.yaml":                    "apiVersion: v2\nname: parent\nversion: 1.0.0\ndependencies:\n  - name: sub\n    version: 0.1.0\n",
			"values.schema.json":            `{"type": "object"}`,
			"charts/sub/Chart.yaml":         "apiVersion: v2\nname: sub\nversion: 0.1.0\n",
			"charts/sub/values.schema.json": `{"type": `,
			"charts/sub/templates/cm.yaml":  configMapTemplate,
			"templates/configmap.yaml":      configMapTemplate,
		},
		want: []Finding{{SeverityError, "charts/sub/values.schema.json", "values.schema.json does not compile"}},
	}, {
		name: "no schema, a custom resource, defaults breaking the schema",
		files: map[string]string{
			"Chart.yaml":                   "apiVersion: v2\nname: web-app\nversion: 1.0.0\n",
			"templates/certificate.yaml":   "apiVersion: cert-manager.io/v1\nkind: Certificate\nmetadata:\n  name: x\n",
			"templates/configmap.yaml":     configMapTemplate,
			"charts/db/Chart.yaml":         "apiVersion: v2\nname: db\nversion: 0.1.0\n",
			"charts/db/values.schema.json": `{"type": "object", "required": ["password"]}`,
		},
		want: []Finding{
			{SeverityWarning, "values.schema.json", "missing"},
			{SeverityWarning, "values.yaml", "a composition with an empty spec would be denied: spec.db.password: "},
			{SeverityWarning, "templates", "chart creates kinds the API server does not serve: cert-manager.io/v1 Certificate"},
			{SeverityInfo, "templates", "RBAC in each composition namespace: create, delete, get, list, patch, update, watch on certificates.cert-manager.io"},
		},
		clean: true,
	}, {
		name: "a kind Compositor never grants",
		files: map[string]string{
			"Chart.yaml":              "apiVersion: v2\nname: admin-app\nversion: 1.0.0\n",
			"values.schema.json":      `{"type": "object"}`,
			"templates/binding.yaml":  "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata:\n  name: x\n",
			"templates/configmap.yml": configMapTemplate,
		},
		want: []Finding{{SeverityError, "templates", "chart creates types Compositor does not grant"}},
	}, {
		name: "a name that cannot become a kind",
		files: map[string]string{
			"Chart.yaml":         "apiVersion: v2\nname: 2048-game\nversion: 1.0.0\n",
			"values.schema.json": `{"type": "object"}`,
		},
		want: []Finding{{SeverityError, "Chart.yaml", "name: chart name cannot become a Kubernetes kind"}},
	}, {
		name: "losses are information",
		files: map[string]string{
			"Chart.yaml":         "apiVersion: v2\nname: lossy-app\nversion: 1.0.0\n",
			"values.schema.json": lossySchema,
		},
		want:  []Finding{{SeverityInfo, "values.schema.json#/properties/auth/oneOf/0/properties/token", "CRD: auth.token: oneOf: "}},
		clean: true,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ch, err := loader.Load(writeChart(t, tt.files))
			require.NoError(t, err)
			findings := Lint(context.Background(), ch, crd.ConversionWebhook{URL: "https://compositor-webhook.compositor-system.svc/convert"})
			for _, want := range tt.want {
				assert.True(t, hasFinding(findings, want), "want %s among\n%s", want, findingLines(findings))
			}
			if tt.clean {
				for _, f := range findings {
					assert.NotEqual(t, SeverityError, f.Severity, "%s", f)
				}
			}
		})
	}
}

func hasFinding(fs []Finding, want Finding) bool {
	for _, f := range fs {
		if f.Severity == want.Severity && f.File == want.File && strings.HasPrefix(f.Message, want.Message) {
			return true
		}
	}
	return false
}

func findingLines(fs []Finding) string {
	var b strings.Builder
	for _, f := range fs {
		b.WriteString(f.String() + "\n")
	}
	return b.String()
}

func TestBuiltinRESTMapper(t *testing.T) {
	m := builtinRESTMapper()
	tests := []struct {
		gvk        schema.GroupVersionKind
		resource   string
		namespaced bool
	}{
		{schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}, "deployments", true},
		{schema.GroupVersionKind{Version: "v1", Kind: "Endpoints"}, "endpoints", true},
		{schema.GroupVersionKind{Version: "v1", Kind: "Namespace"}, "namespaces", false},
		{schema.GroupVersionKind{Group: "networking.k8s.io", Version: "v1", Kind: "Ingress"}, "ingresses", true},
		{schema.GroupVersionKind{Group: "networking.k8s.io", Version: "v1", Kind: "IngressClass"}, "ingressclasses", false},
		{schema.GroupVersionKind{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "ClusterRole"}, "clusterroles", false},
		{schema.GroupVersionKind{Group: "storage.k8s.io", Version: "v1", Kind: "StorageClass"}, "storageclasses", false},
		{schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"}, "customresourcedefinitions", false},
		{schema.GroupVersionKind{Group: "policy", Version: "v1", Kind: "PodDisruptionBudget"}, "poddisruptionbudgets", true},
	}
	for _, tt := range tests {
		mapping, err := m.RESTMapping(tt.gvk.GroupKind(), tt.gvk.Version)
		require.NoError(t, err, "%s", tt.gvk)
		assert.Equal(t, tt.resource, mapping.Resource.Resource, "%s", tt.gvk)
		assert.Equal(t, tt.namespaced, mapping.Scope.Name() == meta.RESTScopeNameNamespace, "%s", tt.gvk)
	}
	for _, gvk := range []schema.GroupVersionKind{
		{Group: "extensions", Version: "v1beta1", Kind: "Ingress"}, // removed from the API server in 1.22
		{Group: "cert-manager.io", Version: "v1", Kind: "Certificate"},
		{Version: "v1", Kind: "ListOptions"},
	} {
		_, err := m.RESTMapping(gvk.GroupKind(), gvk.Version)
		assert.True(t, meta.IsNoMatchError(err), "%s: %v", gvk, err)
	}
}

const testWebhookURL = "https://compositor-webhook.compositor-system.svc/convert"

// sample loads fireworks-app at version; with conversions not nil, its
// values.conversions.yaml is replaced by conversions, or removed when it is empty.
func sample(t *testing.T, version string, conversions *string) *chart.Chart {
	t.Helper()
	ch, err := samplecharts.Load(version)
	require.NoError(t, err)
	if conversions == nil {
		return ch
	}
	var files []*common.File
	found := false
	for _, f := range ch.Files {
		if f.Name != crd.ConversionsFile {
			files = append(files, f)
			continue
		}
		found = true
		if *conversions != "" {
			files = append(files, &common.File{Name: f.Name, ModTime: f.ModTime, Data: []byte(*conversions)})
		}
	}
	require.True(t, found, "fireworks-app %s ships %s", version, crd.ConversionsFile)
	if *conversions != "" {
		require.True(t, slices.ContainsFunc(files, func(f *common.File) bool { return f.Name == crd.ConversionsFile }))
	}
	ch.Files = files
	return ch
}

func ptr(s string) *string { return &s }

// findingsOf are the findings of severity s on file.
func findingsOf(fs []Finding, s Severity, file string) []Finding {
	var out []Finding
	for _, f := range fs {
		if f.Severity == s && f.File == file {
			out = append(out, f)
		}
	}
	return out
}

func severities(fs []Finding, s Severity) []Finding {
	var out []Finding
	for _, f := range fs {
		if f.Severity == s {
			out = append(out, f)
		}
	}
	return out
}

// serviceTypeMove is the move of fireworks-app 2.0.0, acknowledged or not.
func serviceTypeMove(acknowledge string) string {
	s := `conversions:
  - from: 1.1.6
    to: 2.0.0
    rules:
      - move: service.type
        to: exposure
        map: {ClusterIP: internal, NodePort: public, LoadBalancer: public}
        reverse: {internal: ClusterIP, public: LoadBalancer}
`
	if acknowledge != "" {
		s += "        acknowledgeLoss: " + acknowledge + "\n"
	}
	return s
}

func TestLintUpgradeSampleAcknowledgedLoss(t *testing.T) {
	findings, err := LintUpgrade(context.Background(), sample(t, "2.0.0", nil), sample(t, "1.1.5", nil), crd.ConversionWebhook{URL: testWebhookURL})
	require.NoError(t, err)
	assert.Empty(t, severities(findings, SeverityError), "%s", findingLines(findings))
	assert.Empty(t, severities(findings, SeverityWarning), "the move covers service.type and exposure:\n%s", findingLines(findings))
	losses := findingsOf(findings, SeverityInfo, crd.ConversionsFile)
	require.Len(t, losses, 1, "%s", findingLines(findings))
	assert.Equal(t, `step 1.1.6 → 2.0.0 loses service.type, e.g. service.type: "NodePort" comes back as "LoadBalancer" (v1-1-5 → v2-0-0 → v1-1-5); `+
		"reason: 2.0.0 exposes through an Ingress, not a node port; NodePort becomes public, which reads back as LoadBalancer", losses[0].Message)
	// Lint's own checks run too.
	assert.True(t, hasFinding(findings, Finding{SeverityInfo, "Chart.yaml", "API composition.krateo.io/v2-0-0, kind FireworksApp"}), "%s", findingLines(findings))
}

func TestLintUpgradeUndeclaredRename(t *testing.T) {
	findings, err := LintUpgrade(context.Background(), sample(t, "2.0.0", ptr("")), sample(t, "1.1.5", nil), crd.ConversionWebhook{URL: testWebhookURL})
	require.NoError(t, err)
	assert.Empty(t, severities(findings, SeverityError), "%s", findingLines(findings))
	warnings := severities(findings, SeverityWarning)
	require.Len(t, warnings, 1, "%s", findingLines(findings))
	assert.Equal(t, crd.ConversionsFile, warnings[0].File)
	assert.True(t, strings.HasPrefix(warnings[0].Message, "1.1.5 → 2.0.0: removed: service.type; added: exposure. "), warnings[0].Message)
	assert.Contains(t, warnings[0].Message, "declare it in values.conversions.yaml (a move rule)")
	assert.Empty(t, findingsOf(findings, SeverityInfo, crd.ConversionsFile), "no rule, no loss:\n%s", findingLines(findings))
}

func TestLintUpgradeUnacknowledgedLoss(t *testing.T) {
	findings, err := LintUpgrade(context.Background(), sample(t, "2.0.0", ptr(serviceTypeMove(""))), sample(t, "1.1.5", nil), crd.ConversionWebhook{URL: testWebhookURL})
	require.NoError(t, err)
	errs := severities(findings, SeverityError)
	require.Len(t, errs, 1, "%s", findingLines(findings))
	assert.Equal(t, crd.ConversionsFile, errs[0].File)
	assert.Contains(t, errs[0].Message, `step 1.1.6 → 2.0.0, move service.type to exposure: service.type: "NodePort" comes back as "LoadBalancer" (v1-1-5 → v2-0-0 → v1-1-5)`)
	assert.Contains(t, errs[0].Message, "acknowledgeLoss")
	assert.Empty(t, severities(findings, SeverityWarning), "%s", findingLines(findings))
}

func TestLintConversionsThatDoNotCompile(t *testing.T) {
	tests := []struct {
		name, conversions, want string
	}{{
		name:        "bad path",
		conversions: strings.Replace(serviceTypeMove("lossy"), "move: service.type", `move: "service..type"`, 1),
		want:        `conversions[0].rules[0].move: Invalid value: "service..type"`,
	}, {
		name:        "two kinds in a rule",
		conversions: strings.Replace(serviceTypeMove("lossy"), "to: exposure", "to: exposure\n        drop: service.port", 1),
		want:        "conversions[0].rules[0]: Invalid value",
	}, {
		name:        "steps going backwards",
		conversions: "conversions:\n  - from: 2.0.0\n    to: 1.1.6\n    rules: [{drop: service.type}]\n",
		want:        `conversions[0].to: Invalid value: "1.1.6": must be a later chart version than from`,
	}, {
		name:        "unknown field",
		conversions: "conversions:\n  - from: 1.1.6\n    to: 2.0.0\n    rules: [{rename: service.type}]\n",
		want:        `unreadable values.conversions.yaml: error unmarshaling JSON: while decoding JSON: json: unknown field "rename"`,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			check := func(t *testing.T, findings []Finding) {
				errs := severities(findings, SeverityError)
				require.Len(t, errs, 1, "%s", findingLines(findings))
				assert.Equal(t, crd.ConversionsFile, errs[0].File)
				assert.Contains(t, errs[0].Message, tt.want)
			}
			t.Run("alone", func(t *testing.T) {
				check(t, Lint(context.Background(), sample(t, "2.0.0", &tt.conversions), crd.ConversionWebhook{URL: testWebhookURL}))
			})
			t.Run("with previous", func(t *testing.T) {
				findings, err := LintUpgrade(context.Background(), sample(t, "2.0.0", &tt.conversions), sample(t, "1.1.5", nil), crd.ConversionWebhook{URL: testWebhookURL})
				require.NoError(t, err)
				check(t, findings)
				// Without rules to go by, neither the check nor the renames run.
				assert.Empty(t, severities(findings, SeverityWarning), "%s", findingLines(findings))
			})
		})
	}
}

func TestLintUpgradeNotEarlier(t *testing.T) {
	other, err := loader.Load(writeChart(t, map[string]string{
		"Chart.yaml":         "apiVersion: v2\nname: other-app\nversion: 1.0.0\n",
		"values.schema.json": `{"type": "object"}`,
	}))
	require.NoError(t, err)
	tests := []struct {
		name         string
		ch, previous *chart.Chart
		want         string
	}{
		{"same version", sample(t, "2.0.0", nil), sample(t, "2.0.0", nil), "not an earlier version of the chart: fireworks-app 2.0.0 is not earlier than 2.0.0"},
		{"later version", sample(t, "1.1.5", nil), sample(t, "2.0.0", nil), "not an earlier version of the chart: fireworks-app 2.0.0 is not earlier than 1.1.5"},
		{"another chart", sample(t, "2.0.0", nil), other, "not an earlier version of the chart: the earlier chart is other-app, not fireworks-app"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			findings, err := LintUpgrade(context.Background(), tt.ch, tt.previous, crd.ConversionWebhook{URL: testWebhookURL})
			require.ErrorIs(t, err, ErrNotEarlier)
			assert.EqualError(t, err, tt.want)
			assert.Nil(t, findings)
		})
	}
}

// pairCharts loads two versions of the chart pair-app with the given schemas, the
// later with conversions (none when empty).
func pairCharts(t *testing.T, before, after, conversions string) (later, earlier *chart.Chart) {
	t.Helper()
	load := func(version, schema, conversions string) *chart.Chart {
		files := map[string]string{
			"Chart.yaml":         "apiVersion: v2\nname: pair-app\nversion: " + version + "\n",
			"values.schema.json": schema,
		}
		if conversions != "" {
			files[crd.ConversionsFile] = conversions
		}
		ch, err := loader.Load(writeChart(t, files))
		require.NoError(t, err)
		return ch
	}
	return load("2.0.0", after, conversions), load("1.0.0", before, "")
}

func TestLintUpgradePaths(t *testing.T) {
	const (
		serverSchema  = `{"type": "object", "properties": {"replicas": {"type": "integer"}, "server": {"type": "object", "properties": {"host": {"type": "string"}, "port": {"type": "integer"}}}}}`
		backendSchema = `{"type": "object", "properties": {"replicas": {"type": "integer"}, "backend": {"type": "object", "properties": {"host": {"type": "string"}, "port": {"type": "integer"}}}}}`
		replicasOnly  = `{"type": "object", "properties": {"replicas": {"type": "integer"}}}`
		freeForm      = `{"type": "object", "properties": {"replicas": {"type": "integer"}, "server": {"type": "object"}}}`
		listSchema    = `{"type": "object", "properties": {"replicas": {"type": "integer"}, "server": {"type": "array", "items": {"type": "object", "properties": {"host": {"type": "string"}}}}}}`
		listRenamed   = `{"type": "object", "properties": {"replicas": {"type": "integer"}, "server": {"type": "array", "items": {"type": "object", "properties": {"hostname": {"type": "string"}}}}}}`
	)
	tests := []struct {
		name                 string
		before, after, rules string
		warning, info        string // the finding of each severity on values.conversions.yaml, none when empty
	}{{
		name: "an object renamed without a rule", before: serverSchema, after: backendSchema,
		warning: "1.0.0 → 2.0.0: removed: server.host, server.port; added: backend.host, backend.port. ",
	}, {
		name: "an object renamed by a move of the object", before: serverSchema, after: backendSchema,
		rules: "conversions:\n  - {from: 1.0.0, to: 2.0.0, rules: [{move: server, to: backend}]}\n",
	}, {
		name: "a step before the earlier version does not cover it", before: serverSchema, after: backendSchema,
		rules:   "conversions:\n  - {from: 0.1.0, to: 0.2.0, rules: [{move: server, to: backend}]}\n",
		warning: "1.0.0 → 2.0.0: removed: server.host, server.port; added: backend.host, backend.port. ",
	}, {
		name: "removed only", before: serverSchema, after: replicasOnly,
		info: "1.0.0 → 2.0.0: removed: server.host, server.port; dropped without a drop rule",
	}, {
		name: "removed by a drop rule", before: serverSchema, after: replicasOnly,
		rules: "conversions:\n  - {from: 1.0.0, to: 2.0.0, rules: [{drop: server}]}\n",
		info:  "step 1.0.0 → 2.0.0 loses server, e.g. server: ",
	}, {
		name: "added only", before: replicasOnly, after: serverSchema,
	}, {
		name: "an object that became free-form still holds its fields", before: serverSchema, after: freeForm,
	}, {
		name: "a free-form object that got properties", before: freeForm, after: serverSchema,
	}, {
		name: "paths stop at arrays", before: listSchema, after: listRenamed,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			later, earlier := pairCharts(t, tt.before, tt.after, tt.rules)
			findings, err := LintUpgrade(context.Background(), later, earlier, crd.ConversionWebhook{URL: testWebhookURL})
			require.NoError(t, err)
			assert.Empty(t, severities(findings, SeverityError), "%s", findingLines(findings))
			for s, want := range map[Severity]string{SeverityWarning: tt.warning, SeverityInfo: tt.info} {
				got := findingsOf(findings, s, crd.ConversionsFile)
				if want == "" {
					assert.Empty(t, got, "%s", findingLines(findings))
					continue
				}
				if assert.Len(t, got, 1, "%s", findingLines(findings)) {
					assert.True(t, strings.HasPrefix(got[0].Message, want), "%s: want prefix %q, got %q", s, want, got[0].Message)
				}
			}
		})
	}
}
