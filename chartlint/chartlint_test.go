package chartlint

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/compositor-dev/compositor/generators/crd"
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
