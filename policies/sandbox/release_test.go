package sandbox

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	chartcommon "helm.sh/helm/v4/pkg/chart/common"
	chart "helm.sh/helm/v4/pkg/chart/v2"

	"github.com/compositor-dev/compositor/policies"
)

// inputsChart renders what its templates were given: the revision, whether it
// installs, an API of the capabilities, the Kubernetes version and two lookups.
func inputsChart() *chart.Chart {
	return &chart.Chart{
		Metadata: &chart.Metadata{APIVersion: chart.APIVersionV2, Name: "inputs", Version: "0.1.0"},
		Templates: []*chartcommon.File{
			{Name: "templates/cm.yaml", Data: []byte(`apiVersion: v1
kind: ConfigMap
metadata:
  name: inputs
data:
  revision: {{ .Release.Revision | quote }}
  install: {{ .Release.IsInstall | quote }}
  widgets: {{ .Capabilities.APIVersions.Has "example.com/v1/Widget" | quote }}
  kube: {{ .Capabilities.KubeVersion.Version | quote }}
  found: {{ dig "data" "flag" "none" (lookup "v1" "ConfigMap" .Release.Namespace "trigger") | quote }}
  listed: {{ dig "items" list (lookup "v1" "ConfigMap" .Release.Namespace "") | len | quote }}
`)},
			{Name: "templates/NOTES.txt", Data: []byte(`revision {{ .Release.Revision }}`)},
		},
	}
}

// A worker renders with the inputs Helm's install or upgrade would have, and asks its
// parent for each lookup while it renders; the parent answers with the request's own
// Lookup, and the files come back whole, notes included, exactly as in-process.
func TestWorkerRendersWithHelmsInputs(t *testing.T) {
	p := newPool(t, Options{Workers: 1})
	var asked []string
	lookup := func(apiVersion, kind, namespace, name string) (map[string]any, error) {
		asked = append(asked, fmt.Sprintf("%s %s %s/%s", apiVersion, kind, namespace, name))
		if name == "" {
			return map[string]any{"apiVersion": "v1", "kind": "ConfigMapList", "items": []any{map[string]any{"kind": "ConfigMap"}, map[string]any{"kind": "ConfigMap"}}}, nil
		}
		return map[string]any{"data": map[string]any{"flag": "on"}}, nil
	}
	caps := &chartcommon.Capabilities{
		KubeVersion: chartcommon.KubeVersion{Version: "v1.36.0", Major: "1", Minor: "36"},
		APIVersions: chartcommon.VersionSet{"v1", "example.com/v1", "example.com/v1/Widget"},
		HelmVersion: chartcommon.DefaultCapabilities.HelmVersion,
	}
	opts := policies.RenderOptions{ReleaseName: "r", Namespace: "team-a", IsUpgrade: true, Revision: 3, Capabilities: caps, Lookup: lookup}
	files, err := p.RenderFiles(context.Background(), "rendering chart inputs", inputsChart(), "", nil, opts)
	require.NoError(t, err)
	assert.Equal(t, []string{"v1 ConfigMap team-a/trigger", "v1 ConfigMap team-a/"}, asked)
	cm := files["inputs/templates/cm.yaml"]
	for _, want := range []string{`revision: "3"`, `install: "false"`, `widgets: "true"`, `kube: "v1.36.0"`, `found: "on"`, `listed: "2"`} {
		assert.Contains(t, cm, want)
	}
	assert.Equal(t, "revision 3", files["inputs/templates/NOTES.txt"])

	asked = nil
	in, err := policies.RenderFiles(inputsChart(), nil, opts)
	require.NoError(t, err)
	assert.Equal(t, in, files, "the worker's render is the in-process one")

	// Without capabilities, Helm's defaults; without a lookup, nothing is found and
	// nothing is asked.
	files, err = p.RenderFiles(context.Background(), "rendering chart inputs", inputsChart(), "", nil, policies.RenderOptions{ReleaseName: "r", Namespace: "team-a"})
	require.NoError(t, err)
	assert.Contains(t, files["inputs/templates/cm.yaml"], `widgets: "false"`)
	assert.Contains(t, files["inputs/templates/cm.yaml"], `found: "none"`)
	assert.Contains(t, files["inputs/templates/cm.yaml"], `revision: "1"`)
}

// A lookup's error fails the render with it; a template that looks up in a loop is
// stopped after MaxLookups questions; one that loops on what a lookup found is stopped
// at the deadline, its worker killed; and the worker serves the next request.
func TestLookupsAreBounded(t *testing.T) {
	p := newPool(t, Options{Workers: 1})
	loopy := func(tpl string) *chart.Chart {
		return &chart.Chart{
			Metadata:  &chart.Metadata{APIVersion: chart.APIVersionV2, Name: "loopy", Version: "0.1.0"},
			Templates: []*chartcommon.File{{Name: "templates/x.yaml", Data: []byte(tpl)}},
		}
	}
	refused := func(string, string, string, string) (map[string]any, error) {
		return nil, errors.New(`configmaps "x" is forbidden: outside the release namespace`)
	}
	_, err := p.RenderFiles(context.Background(), "r", loopy(`{{ lookup "v1" "ConfigMap" "other" "x" }}`), "", nil, policies.RenderOptions{Lookup: refused})
	require.ErrorIs(t, err, policies.ErrRender)
	assert.ErrorContains(t, err, "outside the release namespace")

	var n atomic.Int32
	count := func(string, string, string, string) (map[string]any, error) { n.Add(1); return nil, nil }
	_, err = p.RenderFiles(context.Background(), "r", loopy(`{{ range until 1000 }}{{ lookup "v1" "ConfigMap" "a" (print .) }}{{ end }}`), "", nil, policies.RenderOptions{Lookup: count})
	require.ErrorIs(t, err, policies.ErrRender)
	assert.ErrorContains(t, err, fmt.Sprintf("more than %d objects", policies.MaxLookups))
	assert.EqualValues(t, policies.MaxLookups, n.Load(), "questions asked of the parent")

	found := func(string, string, string, string) (map[string]any, error) {
		return map[string]any{"kind": "ConfigMap"}, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err = p.RenderFiles(ctx, "r", loopy(`{{ if lookup "v1" "ConfigMap" "a" "trigger" }}{{ range until 100000 }}{{ range until 100000 }}{{ end }}{{ end }}{{ end }}`), "", nil, policies.RenderOptions{Lookup: found})
	require.ErrorIs(t, err, policies.ErrDeadline)
	assert.EqualValues(t, 1, p.Stats().Killed)

	files, err := p.RenderFiles(context.Background(), "r", inputsChart(), "", nil, policies.RenderOptions{Lookup: found})
	require.NoError(t, err)
	assert.Contains(t, files["inputs/templates/cm.yaml"], "found:")
}
