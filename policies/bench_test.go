package policies

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	chartcommon "helm.sh/helm/v4/pkg/chart/common"
	chartvalues "helm.sh/helm/v4/pkg/chart/common/util"
	"helm.sh/helm/v4/pkg/engine"

	"github.com/compositor-dev/compositor/api/policy/v1alpha1"
	"github.com/compositor-dev/compositor/test/samplecharts"
)

// typicalSpec is values-full.yaml of 1.1.5: every documented value set.
func typicalSpec(b *testing.B) map[string]any {
	b.Helper()
	examples, err := samplecharts.Examples("1.1.5")
	require.NoError(b, err)
	for _, ex := range examples {
		if ex.Name == "values-full.yaml" {
			return specOf(b, string(ex.Values))
		}
	}
	b.Fatal("values-full.yaml not found")
	return nil
}

func BenchmarkSchemaValidation(b *testing.B) {
	ch := loadChart(b, "1.1.5")
	spec := typicalSpec(b)
	v := NewJSONSchemaValidator(0)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		vs, err := v.ValidateValues(ctx, ch, "sha256:bench", spec)
		if err != nil || len(vs) != 0 {
			b.Fatal(err, vs)
		}
	}
}

// fivePolicies are policies of the kinds security teams write, on the object.
var fivePolicies = []Policy{
	{Name: "allowed-registries", Rego: registryPolicy, Parameters: map[string]any{"allowed": []any{"registry.example.com/web/nginx", "docker.io"}}},
	{Name: "max-replicas", Rego: plainPolicy},
	{Name: "pull-policy", Action: v1alpha1.EnforcementWarn, Rego: `package pull_policy

warn contains {"msg": "use IfNotPresent or Always", "path": "spec.image.pullPolicy"} if {
	input.review.object.spec.image.pullPolicy == "Never"
}
`},
	{Name: "team-label", Rego: `package team_label

deny contains {"msg": "every composition needs a team label", "path": "metadata.labels.team"} if {
	not input.review.object.metadata.labels.team
}
`},
	{Name: "no-latest", Rego: `package no_latest

deny contains {"msg": sprintf("image tag %q is not pinned", [tag]), "path": "spec.image.tag"} if {
	tag := object.get(input.review.object.spec, ["image", "tag"], "")
	tag in {"", "latest"}
	input.review.operation == "CREATE"
	some group in input.review.userInfo.groups
	not startswith(group, "system:")
}
`},
}

func BenchmarkSchemaAndFivePolicies(b *testing.B) {
	ctx := context.Background()
	e := newTestEngine(b, Options{})
	for _, p := range fivePolicies {
		require.NoError(b, e.Set(ctx, p))
	}
	judge := NewJudge(JudgeOptions{Engine: e})
	r := compositionRequest(typicalSpec(b))
	r.Chart = loadChart(b, "1.1.5")
	r.ChartDigest = "sha256:bench"
	r.UserInfo.Groups = []string{"devs", "system:authenticated"}
	d, err := judge.Decide(ctx, r)
	require.NoError(b, err)
	require.Len(b, d.Violations, 2, fmt.Sprint(d.Violations)) // max-replicas and team-label
	b.ReportAllocs()
	for b.Loop() {
		if _, err := judge.Decide(ctx, r); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkRenderedPolicy(b *testing.B) {
	ctx := context.Background()
	e := newTestEngine(b, Options{})
	require.NoError(b, e.Set(ctx, Policy{Name: "ha", Rego: haPolicy, Target: v1alpha1.TargetRendered}))
	r := compositionRequest(typicalSpec(b))
	r.Chart = loadChart(b, "1.1.5")
	b.ReportAllocs()
	for b.Loop() {
		e.Evaluate(ctx, r)
	}
}

// BenchmarkRender renders fireworks-app 1.1.5 with values-full.yaml in-process; the
// objects part of it (objectsOf) is BenchmarkRenderObjectsOf.
func BenchmarkRender(b *testing.B) {
	ch := loadChart(b, "1.1.5")
	spec := typicalSpec(b)
	opts := RenderOptions{ReleaseName: "x", Namespace: "team-a"}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Render(ch, spec, opts); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRenderObjectsOf is objectsOf alone, on the files fireworks-app 1.1.5 renders
// with values-full.yaml.
func BenchmarkRenderObjectsOf(b *testing.B) {
	ch := loadChart(b, "1.1.5")
	spec := typicalSpec(b)
	processed, _, err := helmValues(ch, spec)
	require.NoError(b, err)
	vals, err := chartvalues.ToRenderValues(processed, spec, chartcommon.ReleaseOptions{Name: "x", Namespace: "team-a", Revision: 1, IsInstall: true}, nil)
	require.NoError(b, err)
	files, err := engine.Render(processed, vals)
	require.NoError(b, err)
	for name := range files {
		if strings.HasSuffix(name, notesSuffix) {
			delete(files, name)
		}
	}
	objs, err := objectsOf(maps.Clone(files), nil)
	require.NoError(b, err)
	require.NotEmpty(b, objs)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := objectsOf(files, nil); err != nil {
			b.Fatal(err)
		}
	}
}
