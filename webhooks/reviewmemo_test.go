package webhooks

import (
	"context"
	"math"
	"reflect"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	chart "helm.sh/helm/v4/pkg/chart/v2"

	corev1alpha1 "github.com/compositor-dev/compositor/api/core/v1alpha1"
	"github.com/compositor-dev/compositor/api/vocab"
	"github.com/compositor-dev/compositor/policies"
	"github.com/compositor-dev/compositor/test/samplecharts"
)

// /validate reuses /mutate's schema check for the same request when the values are
// unchanged, and checks again when another mutating webhook changed them, when the
// UID differs, or when the memory is too old.
func TestValidateReusesTheMutatingSchemaCheck(t *testing.T) {
	m, v, runs := countingHandlers(t, time.Second, 1, nil)
	ctx := context.Background()
	write := func(uid string, spec map[string]any) map[string]any {
		req := compositionRequest("CREATE", named(spec), nil)
		req["uid"] = uid
		return req
	}

	req := write("uid-1", map[string]any{"replicaCount": 2})
	resp := m.Handle(ctx, admissionRequest(t, req))
	require.True(t, resp.Allowed, "%v", resp.Result)
	require.Equal(t, int64(1), runs.Load(), "/mutate checks the schema")
	resp = v.Handle(ctx, admissionRequest(t, req))
	require.True(t, resp.Allowed, "%v", resp.Result)
	assert.Equal(t, int64(1), runs.Load(), "/validate reuses it")
	resp = v.Handle(ctx, admissionRequest(t, req))
	require.True(t, resp.Allowed)
	assert.Equal(t, int64(2), runs.Load(), "once: a second /validate checks again")

	req = write("uid-2", map[string]any{"replicaCount": 2})
	m.Handle(ctx, admissionRequest(t, req))
	changed := write("uid-2", map[string]any{"replicaCount": 3}) // another webhook's patch
	v.Handle(ctx, admissionRequest(t, changed))
	assert.Equal(t, int64(4), runs.Load(), "changed values are checked again")

	m.Handle(ctx, admissionRequest(t, write("uid-3", map[string]any{"replicaCount": 2})))
	v.Handle(ctx, admissionRequest(t, write("uid-4", map[string]any{"replicaCount": 2})))
	assert.Equal(t, int64(6), runs.Load(), "another request's check is not reused")
}

type countingCharts struct {
	fixedChart
	calls *atomic.Int64
}

func (c countingCharts) Chart(ctx context.Context, def *corev1alpha1.CompositionDefinition) (*chart.Chart, string, error) {
	c.calls.Add(1)
	return c.fixedChart.Chart(ctx, def)
}

// /validate takes the definition and chart /mutate found for the same request instead of
// looking them up again, and still judges its own object: a label another webhook
// removed in between is refused by a policy /mutate never ran.
func TestValidateTakesTheChartMutateFound(t *testing.T) {
	ctx := context.Background()
	engine, err := policies.NewEngine(ctx, policies.Options{DisabledBuiltins: policies.BuiltinIDs()})
	require.NoError(t, err)
	require.NoError(t, engine.Set(ctx, policies.Policy{Name: "team", Origin: policies.OriginObject, File: "team.rego", Action: "deny",
		Rego: "package team\n\ndeny contains \"label team is required\" if {\n\tnot input.review.object.metadata.labels.team\n}\n"}))
	ch, err := samplecharts.Load("1.1.5")
	require.NoError(t, err)
	var calls atomic.Int64
	m, v := newHandlers(Options{
		Cached: oneDefinition{},
		Live:   noObjects{},
		Judge:  policies.NewJudge(policies.JudgeOptions{Engine: engine}),
		Charts: countingCharts{fixedChart{chart: ch}, &calls},
	})
	write := func(uid string, labels map[string]any) map[string]any {
		object := named(map[string]any{"replicaCount": 2})
		object["metadata"].(map[string]any)["labels"] = labels
		req := compositionRequest("CREATE", object, nil)
		req["uid"] = uid
		return req
	}
	labelled := map[string]any{"team": "a", vocab.LabelCompositionVersion: "v1-1-5"}

	require.True(t, m.Handle(ctx, admissionRequest(t, write("uid-1", labelled))).Allowed)
	require.Equal(t, int64(1), calls.Load())
	resp := v.Handle(ctx, admissionRequest(t, write("uid-1", labelled)))
	require.True(t, resp.Allowed, "%v", resp.Result)
	assert.Equal(t, int64(1), calls.Load(), "/validate took /mutate's chart")

	require.True(t, m.Handle(ctx, admissionRequest(t, write("uid-2", labelled))).Allowed)
	resp = v.Handle(ctx, admissionRequest(t, write("uid-2", map[string]any{vocab.LabelCompositionVersion: "v1-1-5"})))
	require.False(t, resp.Allowed, "its own object is judged")
	assert.Contains(t, resp.Result.Message, "label team is required")
	assert.Equal(t, int64(2), calls.Load())

	resp = v.Handle(ctx, admissionRequest(t, write("uid-3", labelled)))
	require.True(t, resp.Allowed)
	assert.Equal(t, int64(3), calls.Load(), "nothing to take: looked up")
}

func TestReviewMemoIsTakenOnceWhileFreshForTheSameRequest(t *testing.T) {
	memo := newReviewMemo()
	now := time.Now()
	memo.now = func() time.Time { return now }
	ch := &chart.Chart{Metadata: &chart.Metadata{Name: "c"}}
	request := func(name string, spec map[string]any) *policies.Request {
		return &policies.Request{Operation: "CREATE", Namespace: "team-a", Name: name, Object: map[string]any{"spec": spec}}
	}
	mutated := request("x", map[string]any{"a": "b"})
	mutated.Chart, mutated.ChartDigest, mutated.NamespaceLabels = ch, "sha256:one", map[string]string{"team": "a"}
	mutated.Definition = &policies.ChartRef{URL: "oci://r/c", Version: "1"}

	memo.remember("u", mutated, "v1-1-5", []policies.Violation{{Message: "x"}})
	e := memo.take("u")
	require.NotNil(t, e)
	assert.Nil(t, memo.take("u"), "once")
	r := request("x", map[string]any{"a": "b"})
	require.True(t, e.describe(r, "v1-1-5"))
	assert.Same(t, ch, r.Chart)
	assert.Equal(t, "sha256:one", r.ChartDigest)
	assert.Equal(t, mutated.Definition, r.Definition)
	assert.Equal(t, map[string]string{"team": "a"}, r.NamespaceLabels)
	assert.True(t, r.SchemaChecked)
	assert.Equal(t, []policies.Violation{{Message: "x"}}, r.SchemaViolations)

	changed := request("x", map[string]any{"a": "c"}) // another webhook's patch
	require.True(t, e.describe(changed, "v1-1-5"))
	assert.Same(t, ch, changed.Chart)
	assert.False(t, changed.SchemaChecked, "changed values are checked again")

	assert.False(t, e.describe(request("y", map[string]any{"a": "b"}), "v1-1-5"), "another object")
	assert.False(t, e.describe(request("x", map[string]any{"a": "b"}), "v2-0-0"), "pinned to another version in between")
	other := request("x", map[string]any{"a": "b"})
	other.Namespace = "team-b"
	assert.False(t, e.describe(other, "v1-1-5"), "another namespace")
	assert.Nil(t, other.Chart)

	memo.remember("u", mutated, "v1-1-5", nil)
	now = now.Add(reviewMemoTTL + time.Second)
	assert.Nil(t, memo.take("u"), "too old")

	memo.remember("", mutated, "v1-1-5", nil)
	assert.Nil(t, memo.take(""), "no UID, no memory")
	memo.remember("v", request("x", nil), "v1-1-5", nil)
	assert.Nil(t, memo.take("v"), "no chart, nothing worth keeping")
}

// sameJSON says what reflect.DeepEqual says of decoded JSON values, types of numbers,
// nil against empty and NaN included.
func TestSameJSONAgreesWithDeepEqual(t *testing.T) {
	values := []any{
		nil, true, false, "", "a", int64(1), int64(2), float64(1), math.NaN(),
		map[string]any(nil), map[string]any{}, map[string]any{"a": int64(1)}, map[string]any{"a": float64(1)},
		map[string]any{"a": int64(1), "b": nil}, map[string]any{"a": int64(1), "c": nil},
		[]any(nil), []any{}, []any{"a"}, []any{"a", "b"}, []any{"b", "a"},
		map[string]any{"x": []any{map[string]any{"y": "z"}}}, map[string]any{"x": []any{map[string]any{"y": "w"}}},
		int32(1), []string{"a"},
	}
	for _, a := range values {
		for _, b := range values {
			assert.Equal(t, reflect.DeepEqual(a, b), sameJSON(a, b), "%#v against %#v", a, b)
		}
	}
	deep := map[string]any{"x": []any{map[string]any{"y": "z"}}}
	assert.True(t, sameJSON(deep, map[string]any{"x": []any{map[string]any{"y": "z"}}}), "equal, not identical")
}
