package webhooks

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"helm.sh/helm/v4/pkg/action"
	chartcommon "helm.sh/helm/v4/pkg/chart/common"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	kubefake "helm.sh/helm/v4/pkg/kube/fake"
	release "helm.sh/helm/v4/pkg/release/v1"
	releaseutil "helm.sh/helm/v4/pkg/release/v1/util"
	"helm.sh/helm/v4/pkg/storage"
	"helm.sh/helm/v4/pkg/storage/driver"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	"github.com/compositor-dev/compositor/policies"
)

// arithmetic is a chart whose template computes with numbers and booleans from the
// values, the way templates in the wild do.
func arithmetic() *chart.Chart {
	template := `apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ .Release.Name }}
data:
  repeated: "{{ range until (int .Values.n) }}x{{ end }}"
  plain: "{{ .Values.n }}"
  sum: "{{ add .Values.n 1 }}"
  product: "{{ mul .Values.n 2 }}"
  size: "{{ if gt (int .Values.n) 3 }}big{{ else }}small{{ end }}"
  compared: "{{ if eq .Values.n 7 }}seven{{ else }}other{{ end }}"
  ratio: "{{ .Values.ratio }}"
  scaled: "{{ mulf (float64 .Values.ratio) 3 }}"
  large: "{{ .Values.large }}"
  switch: "{{ if .Values.on }}on{{ else }}off{{ end }}"
  toggled: "{{ not .Values.on }}"
  json: {{ toJson .Values | quote }}
`
	return &chart.Chart{
		Metadata:  &chart.Metadata{APIVersion: chart.APIVersionV2, Name: "arithmetic", Version: "0.1.0"},
		Values:    map[string]any{"n": 1, "ratio": 0.5, "large": 1, "on": false},
		Templates: []*chartcommon.File{{Name: "templates/configmap.yaml", Data: []byte(template)}},
	}
}

// installManifests renders ch as Helm's install action does when the controller calls
// it (client-only here: the same engine, values and ordering), with spec decoded from
// the stored object as client-go decodes it for the controller, each object with the
// ownership metadata the action adds before sending it.
func installManifests(t *testing.T, ch *chart.Chart, storedJSON []byte) []map[string]any {
	t.Helper()
	obj, _, err := unstructured.UnstructuredJSONScheme.Decode(storedJSON, nil, nil)
	require.NoError(t, err)
	spec, _, err := unstructured.NestedMap(obj.(runtime.Unstructured).UnstructuredContent(), "spec")
	require.NoError(t, err)

	cfg := &action.Configuration{
		Releases:     storage.Init(driver.NewMemory()),
		KubeClient:   &kubefake.PrintingKubeClient{Out: io.Discard},
		Capabilities: chartcommon.DefaultCapabilities,
	}
	install := action.NewInstall(cfg)
	install.ReleaseName, install.Namespace = "parity", "default"
	install.DryRunStrategy = action.DryRunClient
	r, err := install.RunWithContext(context.Background(), ch, spec)
	require.NoError(t, err)
	rel, ok := r.(*release.Release)
	require.True(t, ok, "%T", r)
	var out []map[string]any
	for _, doc := range releaseutil.SplitManifests(rel.Manifest) {
		m := map[string]any{}
		require.NoError(t, yaml.Unmarshal([]byte(doc), &m))
		out = append(out, policies.HelmOwned(m, install.ReleaseName, install.Namespace, false))
	}
	return out
}

// admissionManifests renders ch as a rendered policy sees it: the object decoded from
// the AdmissionReview the API server sends.
func admissionManifests(t *testing.T, ch *chart.Chart, storedJSON []byte) []map[string]any {
	t.Helper()
	req := compositionRequest("CREATE", decodeJSON(t, storedJSON), nil)
	decoded, bad := decode(admissionRequest(t, req))
	require.Nil(t, bad)
	objs, err := policies.Render(ch, decoded.Object.Object["spec"].(map[string]any), policies.RenderOptions{ReleaseName: "parity", Namespace: "default"})
	require.NoError(t, err)
	var out []map[string]any
	for _, o := range objs {
		out = append(out, o.Object)
	}
	return out
}

// Issue 12, item 3: what rendered policies judge at admission is what the controller
// installs, byte for byte, whatever the template does with numbers and booleans.
func TestAdmissionRendersAsTheInstall(t *testing.T) {
	ch := arithmetic()
	for _, spec := range []string{
		`{"n": 500, "ratio": 0.25, "large": 1000000, "on": true}`,
		`{"n": 7, "ratio": 2, "large": 12345678901, "on": false}`,
		`{"n": 0, "ratio": 1.5e3, "large": -3, "on": true}`,
		`{"n": 3}`,
	} {
		t.Run(spec, func(t *testing.T) {
			stored := []byte(fmt.Sprintf(`{"apiVersion":"composition.krateo.io/v1-1-5","kind":"FireworksApp","metadata":{"name":"demo","namespace":"default"},"spec":%s}`, spec))
			installed := installManifests(t, ch, stored)
			judged := admissionManifests(t, ch, stored)
			require.Len(t, installed, 1)
			assert.Equal(t, installed, judged)
			var values map[string]any
			require.NoError(t, json.Unmarshal([]byte(spec), &values))
			if n, ok := values["n"].(float64); ok {
				assert.Len(t, installed[0]["data"].(map[string]any)["repeated"], int(n), "the template computed with n")
			}
		})
	}
}
