package policies

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/compositor-dev/compositor/api/policy/v1alpha1"
)

func refs(objs []RenderedObject) []string {
	var out []string
	for _, o := range objs {
		out = append(out, o.Ref())
	}
	return out
}

func TestRender(t *testing.T) {
	ch := loadChart(t, "2.0.0")
	objs, err := Render(ch, nil, RenderOptions{ReleaseName: "x", Namespace: "team-a"})
	require.NoError(t, err)
	assert.Equal(t, []string{"ConfigMap/x-config", "Deployment/x-fireworks-app", "Service/x-fireworks-app"}, refs(objs))

	objs, err = Render(ch, map[string]any{"exposure": "public", "cache": map[string]any{"enabled": true}}, RenderOptions{ReleaseName: "z", Namespace: "team-a"})
	require.NoError(t, err)
	assert.Equal(t, []string{"ConfigMap/z-cache", "ConfigMap/z-config", "Deployment/z-fireworks-app", "Ingress/z-fireworks-app", "Service/z-fireworks-app"}, refs(objs))

	// A release named "y" puts the label value y, YAML 1.1's true, in the cache
	// subchart's ConfigMap: Helm's kube client cannot build it, and neither can Render.
	_, err = Render(ch, map[string]any{"cache": map[string]any{"enabled": true}}, RenderOptions{ReleaseName: "y", Namespace: "team-a"})
	assert.ErrorIs(t, err, ErrRender)
	assert.ErrorContains(t, err, "template fireworks-app/charts/cache/templates/configmap.yaml")
	assert.Equal(t, 1, len(ch.Metadata.Dependencies), "the shared chart is untouched")

	_, err = Render(nil, nil, RenderOptions{})
	assert.ErrorIs(t, err, ErrRender)
}

const haPolicy = `package ha

deny contains {"msg": sprintf("must be at least 2 for a highly available app, not %d", [obj.spec.replicas]), "path": "spec.replicas"} if {
	some obj in input.rendered
	obj.kind == "Deployment"
	obj.spec.replicas < 2
}
`

func TestRenderedTarget(t *testing.T) {
	ctx := context.Background()
	e := newTestEngine(t, Options{})
	require.NoError(t, e.Set(ctx, Policy{Name: "ha", Rego: haPolicy, Target: v1alpha1.TargetRendered}))
	r := compositionRequest(map[string]any{"replicaCount": 1})
	r.Chart = loadChart(t, "1.1.5")
	vs := e.Evaluate(ctx, r)
	assert.Equal(t, []string{"Deployment/x-fireworks-app spec.replicas: must be at least 2 for a highly available app, not 1 [policy ha]"}, FormatLines(vs))
	require.Len(t, vs, 1)
	assert.Equal(t, "Deployment/x-fireworks-app", vs[0].Object)

	r = compositionRequest(map[string]any{"replicaCount": 3})
	r.Chart = loadChart(t, "1.1.5")
	vs = e.Evaluate(ctx, r)
	assert.Empty(t, vs)

	// Without a chart (a definition) nothing renders and the policy does not apply.
	vs = e.Evaluate(ctx, compositionRequest(map[string]any{"replicaCount": 1}))
	assert.Empty(t, vs)
}

func TestRenderFailureIsAViolation(t *testing.T) {
	ctx := context.Background()
	e := newTestEngine(t, Options{})
	require.NoError(t, e.Set(ctx, Policy{Name: "ha", Rego: haPolicy, Target: v1alpha1.TargetRendered}))
	r := compositionRequest(map[string]any{})
	r.Chart = loadChart(t, "1.1.5")
	r.Chart.Templates = append(r.Chart.Templates[:0:0], r.Chart.Templates...)
	for i, tpl := range r.Chart.Templates {
		if tpl.Name == "templates/configmap.yaml" {
			r.Chart.Templates[i] = withData(tpl, "{{ fail \"broken on purpose\" }}")
		}
	}
	vs := e.Evaluate(ctx, r)
	require.Len(t, vs, 1)
	assert.Contains(t, vs[0].Message, "broken on purpose")
	assert.Equal(t, v1alpha1.EnforcementDeny, vs[0].Action)
}
