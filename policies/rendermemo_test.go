package policies

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	chart "helm.sh/helm/v4/pkg/chart/v2"

	"github.com/compositor-dev/compositor/policies/gatekeeper"
)

// Two inputs a template can tell apart never share a key; the same input, however its
// maps were built, always does.
func TestRenderKeysTellEveryInputApart(t *testing.T) {
	base := RenderOptions{ReleaseName: "x", Namespace: "team-a"}
	key := func(digest string, spec map[string]any, opts RenderOptions) renderKey {
		t.Helper()
		k, ok := keyOf(digest, spec, opts)
		require.True(t, ok)
		return k
	}
	same := key("sha256:1", map[string]any{"a": int64(1), "b": []any{"x", nil}}, base)
	assert.Equal(t, same, key("sha256:1", map[string]any{"b": []any{"x", nil}, "a": int64(1)}, base), "key order")

	upgrade := base
	upgrade.IsUpgrade = true
	otherRelease, otherNamespace := base, base
	otherRelease.ReleaseName, otherNamespace.Namespace = "y", "team-b"
	// A release "x" in "team-a" against "xt" in "eam-a": lengths keep strings apart.
	shifted := RenderOptions{ReleaseName: "xt", Namespace: "eam-a"}
	different := map[string]renderKey{
		"digest":           key("sha256:2", map[string]any{"a": int64(1), "b": []any{"x", nil}}, base),
		"upgrade":          key("sha256:1", map[string]any{"a": int64(1), "b": []any{"x", nil}}, upgrade),
		"release":          key("sha256:1", map[string]any{"a": int64(1), "b": []any{"x", nil}}, otherRelease),
		"namespace":        key("sha256:1", map[string]any{"a": int64(1), "b": []any{"x", nil}}, otherNamespace),
		"run together":     key("sha256:1", map[string]any{"a": int64(1), "b": []any{"x", nil}}, shifted),
		"float":            key("sha256:1", map[string]any{"a": float64(1), "b": []any{"x", nil}}, base),
		"string":           key("sha256:1", map[string]any{"a": "1", "b": []any{"x", nil}}, base),
		"json number":      key("sha256:1", map[string]any{"a": json.Number("1"), "b": []any{"x", nil}}, base),
		"empty map":        key("sha256:1", map[string]any{"a": int64(1), "b": []any{"x", map[string]any{}}}, base),
		"empty list":       key("sha256:1", map[string]any{"a": int64(1), "b": []any{"x", []any{}}}, base),
		"nested":           key("sha256:1", map[string]any{"a": int64(1), "b": []any{[]any{"x"}, nil}}, base),
		"key moved":        key("sha256:1", map[string]any{"a": int64(1), "b": []any{"x"}, "c": nil}, base),
		"false for absent": key("sha256:1", map[string]any{"a": int64(1), "b": []any{"x", false}}, base),
	}
	seen := map[renderKey]string{same: "the base"}
	for what, k := range different {
		if other, ok := seen[k]; ok {
			t.Errorf("%s shares its key with %s", what, other)
		}
		seen[k] = what
	}

	_, ok := keyOf("", map[string]any{}, base)
	assert.False(t, ok, "a chart without a digest cannot be told from another")
	_, ok = keyOf("sha256:1", map[string]any{"a": struct{}{}}, base)
	assert.False(t, ok, "a value no decoder gives")
}

func memoObjects(name string, replicas int64) []RenderedObject {
	return []RenderedObject{{Template: "c/templates/d.yaml", Object: map[string]any{
		"apiVersion": "apps/v1", "kind": "Deployment",
		"metadata": map[string]any{"name": name},
		"spec":     map[string]any{"replicas": replicas, "ratio": 0.5},
	}}}
}

// What is recalled is what was remembered, numbers as a render gives them, and a copy
// of it: a reader that changes it changes nothing for the next one.
func TestRenderMemoRecallsACopy(t *testing.T) {
	m := newRenderMemo(1 << 20)
	key, _ := keyOf("sha256:1", map[string]any{}, RenderOptions{})
	_, ok := m.recall(key)
	assert.False(t, ok)
	m.remember(key, memoObjects("d", 3))

	got, ok := m.recall(key)
	require.True(t, ok)
	assert.Equal(t, memoObjects("d", 3), got)
	got[0].Object["spec"].(map[string]any)["replicas"] = int64(100)
	again, _ := m.recall(key)
	assert.Equal(t, memoObjects("d", 3), again)

	var none *renderMemo // RenderMemoBytes < 0
	none.remember(key, memoObjects("d", 3))
	_, ok = none.recall(key)
	assert.False(t, ok)
	assert.Nil(t, newRenderMemo(-1))
}

// The memo keeps to its budget, letting the least recently used renders go first, and
// keeps no render too large to share it.
func TestRenderMemoKeepsToItsBudget(t *testing.T) {
	one, err := json.Marshal(memoObjects("d-000", 1))
	require.NoError(t, err)
	m := newRenderMemo(8 * (len(one) + memoEntryCost)) // room for eight
	keys := make([]renderKey, 10)
	for i := range keys {
		keys[i], _ = keyOf("sha256:1", map[string]any{"i": int64(i)}, RenderOptions{})
	}
	for i := range 8 {
		m.remember(keys[i], memoObjects(fmt.Sprintf("d-%03d", i), 1))
	}
	_, ok := m.recall(keys[0]) // now the most recently used
	require.True(t, ok)
	m.remember(keys[8], memoObjects("d-008", 1))
	m.remember(keys[9], memoObjects("d-009", 1))
	for i, want := range []bool{true, false, false, true, true, true, true, true, true, true} {
		_, ok := m.recall(keys[i])
		assert.Equal(t, want, ok, "render %d", i)
	}
	assert.LessOrEqual(t, m.used, m.budget)
	assert.Len(t, m.entries, m.recent.Len())

	big := memoObjects("d", 1)
	big[0].Object["data"] = string(make([]byte, m.budget/8-memoEntryCost))
	bigKey, _ := keyOf("sha256:big", map[string]any{}, RenderOptions{})
	m.remember(bigKey, big)
	_, ok = m.recall(bigKey)
	assert.False(t, ok, "a render over an eighth of the budget")
	_, ok = m.recall(keys[9])
	assert.True(t, ok, "and it pushed nothing out")

	// Renders of nothing cost their entries: a tenant whose chart renders nothing for
	// some values cannot fill memory with them.
	empty := newRenderMemo(1 << 20)
	for i := range 10000 {
		key, _ := keyOf("sha256:1", map[string]any{"i": int64(i)}, RenderOptions{})
		empty.remember(key, []RenderedObject{})
	}
	assert.LessOrEqual(t, len(empty.entries), (1<<20)/memoEntryCost)
	assert.LessOrEqual(t, empty.used, empty.budget)
}

// replicasTemplate reads neither the operation nor the old object.
const replicasTemplate = `apiVersion: templates.gatekeeper.sh/v1
kind: ConstraintTemplate
metadata: {name: testreplicas}
spec:
  crd: {spec: {names: {kind: TestReplicas}}}
  targets:
  - target: admission.k8s.gatekeeper.sh
    rego: |
      package testreplicas
      violation[{"msg": sprintf("replicas %v", [input.review.object.spec.replicas])}] {
        input.review.object.spec.replicas > 1
      }
`

// countingSandbox renders in-process and counts the renders.
type countingSandbox struct{ renders atomic.Int32 }

func (s *countingSandbox) Render(_ context.Context, _ string, ch *chart.Chart, _ string, spec map[string]any, opts RenderOptions) ([]RenderedObject, error) {
	s.renders.Add(1)
	return Render(ch, spec, opts)
}

func (s *countingSandbox) RenderFiles(_ context.Context, _ string, ch *chart.Chart, _ string, spec map[string]any, opts RenderOptions) (map[string]string, error) {
	s.renders.Add(1)
	return RenderFiles(ch, spec, opts)
}

func (s *countingSandbox) ValidateValues(context.Context, string, *chart.Chart, string, map[string]any) ([]Violation, error) {
	return nil, nil
}

// An update's old objects are what the write of its old spec rendered, remembered
// instead of rendered again, and judged as a second render would judge them; an input
// that differs (namespace, release, chart) renders again. Without a library that
// tells updates from creations, nothing is remembered.
func TestUpdatesRecallTheirOldRender(t *testing.T) {
	sandbox := &countingSandbox{}
	ch := loadChart(t, "1.1.5")
	history := gatekeeper.NewLibrary([]*gatekeeper.Template{testTemplate(t, historyTemplate)},
		[]*gatekeeper.Constraint{testConstraint(t, "TestHistory", "deployments", "{match: {kinds: [{apiGroups: [apps], kinds: [Deployment]}]}}")})
	// write is a write of replicas; an update's old version has old replicas and is
	// of generation old-1 (each test composition is created with 2 replicas, and each
	// update adds one).
	write := func(op string, replicas, old int, edit func(r *Request)) *Request {
		r := compositionRequest(map[string]any{"replicaCount": int64(replicas)})
		r.Operation, r.Chart, r.ChartDigest = op, ch, "sha256:fireworks-1.1.5"
		if op == "UPDATE" {
			r.OldObject = compositionRequest(map[string]any{"replicaCount": int64(old)}).Object
			r.OldObject["metadata"].(map[string]any)["generation"] = int64(old - 1)
		}
		if edit != nil {
			edit(r)
		}
		return r
	}
	const updated = "deny Deployment/x-fireworks-app: op=UPDATE replicas=3 old=2 [constraint TestHistory/deployments]"
	// evaluate gives the messages of r and how many renders it took.
	evaluate := func(e *Engine, r *Request) ([]string, int32) {
		before := sandbox.renders.Load()
		got := messages(NewJudge(JudgeOptions{Engine: e, Renderer: &Renderer{Sandbox: sandbox}}).Policies(context.Background(), r))
		return got, sandbox.renders.Load() - before
	}

	fresh := newTestEngine(t, Options{RenderMemoBytes: -1})
	fresh.SetConstraints(OriginObject, history)
	evaluate(fresh, write("CREATE", 2, 0, nil))
	got, renders := evaluate(fresh, write("UPDATE", 3, 2, nil))
	assert.Equal(t, []string{updated}, got)
	assert.EqualValues(t, 2, renders, "without a memo, the old spec renders again")

	e := newTestEngine(t, Options{})
	e.SetConstraints(OriginObject, history)
	evaluate(e, write("CREATE", 2, 0, nil))
	got, renders = evaluate(e, write("UPDATE", 3, 2, nil))
	assert.Equal(t, []string{updated}, got, "the same verdict as a second render's")
	assert.EqualValues(t, 1, renders, "the old objects are those the create rendered")
	got, renders = evaluate(e, write("UPDATE", 4, 3, nil))
	assert.Equal(t, []string{"deny Deployment/x-fireworks-app: op=UPDATE replicas=4 old=3 [constraint TestHistory/deployments]"}, got)
	assert.EqualValues(t, 1, renders, "and those the last update rendered")

	// Which render stands for the old version depends on its generation alone, not on
	// what the memo holds: generation 1 was installed, a later one upgraded to. Only
	// the install render of 5 replicas is remembered here.
	evaluate(e, write("CREATE", 5, 0, nil))
	upgraded := write("UPDATE", 6, 5, nil)
	upgraded.OldObject["metadata"].(map[string]any)["generation"] = int64(3)
	_, renders = evaluate(e, upgraded)
	assert.EqualValues(t, 2, renders, "an old version that came with an update is rendered as an upgrade")

	for what, edit := range map[string]func(r *Request){
		"another namespace": func(r *Request) { r.Namespace = "team-b" },
		"another release":   func(r *Request) { r.ReleaseName = "other" },
		"another chart":     func(r *Request) { r.ChartDigest = "sha256:other" },
		"no digest":         func(r *Request) { r.ChartDigest = "" },
	} {
		got, renders = evaluate(e, write("UPDATE", 3, 2, edit))
		assert.EqualValues(t, 2, renders, what)
		assert.Len(t, got, 1, what)
	}

	plain := newTestEngine(t, Options{})
	plain.SetConstraints(OriginObject, gatekeeper.NewLibrary([]*gatekeeper.Template{testTemplate(t, replicasTemplate)},
		[]*gatekeeper.Constraint{testConstraint(t, "TestReplicas", "deployments", "{match: {kinds: [{apiGroups: [apps], kinds: [Deployment]}]}}")}))
	got, _ = evaluate(plain, write("CREATE", 2, 0, nil))
	assert.Equal(t, []string{"deny Deployment/x-fireworks-app: replicas 2 [constraint TestReplicas/deployments]"}, got)
	assert.Empty(t, plain.renders.entries, "no library needs old objects")
}
