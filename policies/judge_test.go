package policies

import (
	"context"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	chartcommon "helm.sh/helm/v4/pkg/chart/common"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"
)

const threeViolations = `apiVersion: composition.krateo.io/v1-1-5
kind: FireworksApp
metadata:
  name: shop
  namespace: team-a
spec:
  image:
    registry: docker.io
  storage:
    size: 10GB
  cache:
    enabled: true
    maxMemory: lots
`

// TestTheJudgeGivesAllViolationsInOneDenial is what `compositor validate` does with a file
// (NewRequest + Check) and what the webhook answers: the schema error inside the
// oneOf, the one in the cache subchart and the policy denial, one per line.
func TestTheJudgeGivesAllViolationsInOneDenial(t *testing.T) {
	ctx := context.Background()
	e, err := NewEngine(ctx, Options{})
	require.NoError(t, err)
	require.NoError(t, e.Set(ctx, Policy{Name: "allowed-registries", Rego: registryPolicy, Parameters: map[string]any{"allowed": []any{"registry.example.com"}}}))
	judge := NewJudge(JudgeOptions{Engine: e})

	obj := map[string]any{}
	require.NoError(t, yaml.Unmarshal([]byte(threeViolations), &obj))
	r := NewRequest(Write{Operation: "CREATE", Object: obj, Namespace: "default"})
	assert.Equal(t, "team-a", r.Namespace)
	assert.Equal(t, "shop", r.ReleaseName)
	assert.Equal(t, "FireworksApp", r.Kind.Kind)
	r.Chart = loadChart(t, "1.1.5")

	d, err := judge.Decide(ctx, r)
	require.NoError(t, err)
	want := strings.Join([]string{
		`spec.storage.size: must match pattern ^[0-9]+Gi$ (values.schema.json)`,
		`spec.cache.maxMemory: must match pattern ^[0-9]+(Mi|Gi)$ (values.schema.json of subchart cache)`,
		`spec.image.registry: registry "docker.io" is not allowed [policy allowed-registries]`,
	}, "\n")
	assert.Equal(t, want, d.Message())
	statusErr := d.Err(schema.GroupKind{Group: "composition.krateo.io", Kind: "FireworksApp"}, "shop")
	require.NotNil(t, statusErr)
	assert.Equal(t, int32(422), statusErr.ErrStatus.Code)
	assert.Equal(t, want, statusErr.ErrStatus.Message)
	assert.Len(t, statusErr.ErrStatus.Details.Causes, 3)

	// Only the policy left: 403 Forbidden.
	spec := obj["spec"].(map[string]any)
	delete(spec, "storage")
	delete(spec, "cache")
	d, err = judge.Decide(ctx, r)
	require.NoError(t, err)
	assert.Equal(t, int32(403), d.Err(schema.GroupKind{Kind: "FireworksApp"}, "shop").ErrStatus.Code)
}

func TestTheJudgeSkipsTheSchemaOfADeletion(t *testing.T) {
	r := compositionRequest(map[string]any{"replicaCount": 100})
	r.Operation, r.OldObject, r.Object = "DELETE", r.Object, nil
	r.Chart = loadChart(t, "1.1.5")
	d, err := NewJudge(JudgeOptions{}).Decide(context.Background(), r)
	require.NoError(t, err)
	assert.Empty(t, d.Violations)
}

func TestFormatting(t *testing.T) {
	vs := []Violation{
		{Policy: "p", Source: "policy p", Message: "multi\nline\tmessage", Action: "deny", ID: "R1"},
		{Policy: "p", Source: "policy p", Message: "same id", Action: "deny", ID: "p"},
		{Source: SourceSchema + " of subchart cache", Path: "spec.cache.x", Message: "m", Action: "deny"},
		{Source: SourceSchema, Path: "spec.z", Message: "m", Action: "deny"},
		{Policy: "ww", Source: "policy ww", Message: strings.Repeat("é", 200), Action: "warn"},
		{Policy: "d", Source: "policy d", Message: "hidden", Action: "dryrun"},
	}
	assert.Equal(t, strings.Join([]string{
		"spec.z: m (values.schema.json)",
		"spec.cache.x: m (values.schema.json of subchart cache)",
		"multi line message [policy p/R1]",
		"same id [policy p]",
	}, "\n"), FormatDenial(vs))
	w := FormatWarnings(vs)
	require.Len(t, w, 1)
	// 412 bytes shortened to MaxWarningLength, the cut falling inside an é: it backs
	// off to the é's start rather than split it.
	assert.Equal(t, "[policy ww] "+strings.Repeat("é", 120)+"...", w[0])
	assert.True(t, utf8.ValidString(w[0]))
	assert.NotContains(t, FormatDenial(vs)+strings.Join(w, ""), "hidden")

	// The API server drops a warning with a control character or bytes that are not
	// UTF-8; they are written out instead.
	w = FormatWarnings([]Violation{{Policy: "esc", Source: "policy esc", Message: "red \x1b[31mtext\x00 and \xff", Action: "warn"}})
	require.Len(t, w, 1)
	assert.Equal(t, `[policy esc] red \x1b[31mtext\x00 and `+"\uFFFD", w[0])
	assert.False(t, strings.ContainsFunc(w[0], unicode.IsControl))
	w = FormatWarnings([]Violation{{Policy: "bidi", Source: "policy bidi", Message: "image \u202eexe.txt", Action: "warn"}})
	assert.Equal(t, []string{`[policy bidi] image \u202eexe.txt`}, w, "a format character is written out")
	assert.True(t, utf8.ValidString(w[0]))
}

// Two judges in one process keep their own bounds: the Renderer is an option of each,
// not a setting of the process. A chart that renders past one judge's bound on
// rendered bytes fails its rendered policy there, and renders whole for the other.
func TestJudgesKeepTheirOwnRenderBounds(t *testing.T) {
	ctx := context.Background()
	e, err := NewEngine(ctx, Options{DisabledBuiltins: BuiltinIDs()})
	require.NoError(t, err)
	require.NoError(t, e.Set(ctx, Policy{Name: "no-huge-configmaps", Target: "rendered", Rego: `package p

deny contains {"msg": "a ConfigMap over 100000 bytes"} if {
	some obj in input.rendered
	obj.kind == "ConfigMap"
	count(obj.data.blob) > 100000
}
`}))
	big := &chart.Chart{
		Metadata: &chart.Metadata{APIVersion: chart.APIVersionV2, Name: "big", Version: "0.1.0"},
		Templates: []*chartcommon.File{{Name: "templates/cm.yaml", Data: []byte(
			"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: big\ndata:\n  blob: {{ repeat 8000 \"x\" | quote }}\n")}},
	}
	write := func() *Request {
		r := compositionRequest(map[string]any{})
		r.Chart, r.ChartDigest = big, "sha256:big"
		return r
	}
	tight := NewJudge(JudgeOptions{Engine: e, Renderer: &Renderer{MaxRenderedBytes: 4096}})
	roomy := NewJudge(JudgeOptions{Engine: e})

	d, err := tight.Decide(ctx, write())
	require.NoError(t, err)
	require.True(t, d.Denied(), "past the tight judge's bound")
	assert.Contains(t, d.Message(), "cannot evaluate")
	assert.Contains(t, d.Message(), "4096")

	d, err = roomy.Decide(ctx, write())
	require.NoError(t, err)
	assert.False(t, d.Denied(), "within the default bound: %s", d.Message())
	assert.Equal(t, DefaultMaxRenderedBytes, roomy.Renderer().RenderedBytes())
}
