package policies

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	authenticationv1 "k8s.io/api/authentication/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/compositor-dev/compositor/api/policy/v1alpha1"
)

// newTestEngine returns an engine without the built-ins, so tests see only their own
// policies.
func newTestEngine(t testing.TB, opts Options) *Engine {
	t.Helper()
	opts.DisabledBuiltins = BuiltinIDs()
	e, err := NewEngine(context.Background(), opts)
	require.NoError(t, err)
	return e
}

const registryPolicy = `package compositor.allowed_registries

deny contains {"msg": sprintf("registry %q is not allowed", [registry]), "path": "spec.image.registry"} if {
	registry := input.review.object.spec.image.registry
	not registry in input.parameters.allowed
}
`

func compositionRequest(spec map[string]any) *Request {
	return &Request{
		Operation: "CREATE",
		Kind:      gvk("composition.krateo.io", "v1-1-5", "FireworksApp"),
		Resource:  metav1.GroupVersionResource{Group: "composition.krateo.io", Version: "v1-1-5", Resource: "fireworksapps"},
		Namespace: "team-a",
		Name:      "x",
		Object: map[string]any{
			"apiVersion": "composition.krateo.io/v1-1-5",
			"kind":       "FireworksApp",
			"metadata":   map[string]any{"name": "x", "namespace": "team-a", "labels": map[string]any{"tier": "web"}},
			"spec":       spec,
		},
		ReleaseName: "x",
	}
}

func TestCompileErrorsHaveLineAndColumn(t *testing.T) {
	tests := []struct {
		name string
		rego string
		want []v1alpha1.CompileError
	}{
		{"syntax at the end of the file", "package p\n\ndeny contains msg if {\n\tmsg := \"x\"\n", []v1alpha1.CompileError{{Line: 5, Column: 1}}},
		// OPA places an unexpected line break at column 0 of the next line; the
		// position is where the identifier is missing, after "spec.".
		{"syntax at a line break", "package p\n\ndeny contains msg if {\n  msg := input.spec.\n}\n", []v1alpha1.CompileError{{Line: 4, Column: 21}}},
		{"syntax at a CRLF line break", "package p\r\n\r\ndeny contains msg if {\r\n  msg := input.spec.\r\n}\r\n", []v1alpha1.CompileError{{Line: 4, Column: 21}}},
		{"undefined ref", "package p\n\ndeny contains msg if {\n\tmsg := undefined_thing\n}\n", []v1alpha1.CompileError{{Line: 4, Column: 2}}},
		{"syntax with column", "package p\n\ndeny contains msg if {\n\tmsg := \"x\" +\n}\n", []v1alpha1.CompileError{{Line: 5, Column: 1}}},
		{"rego v0 syntax", "package p\n\ndeny[msg] {\n\tmsg := \"x\"\n}\n", []v1alpha1.CompileError{{Line: 3, Column: 1}}},
		{"no deny or warn", "package p\n\nallow := true\n", []v1alpha1.CompileError{{Line: 1, Column: 1}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Compile(context.Background(), Policy{Name: "p", Rego: tt.rego, File: "spec.rego"})
			require.ErrorIs(t, err, ErrCompile)
			var ce *CompileError
			require.True(t, errors.As(err, &ce))
			require.NotEmpty(t, ce.Errors)
			assert.Equal(t, tt.want[0].Line, ce.Errors[0].Line, "%v", ce)
			assert.Equal(t, tt.want[0].Column, ce.Errors[0].Column, "%v", ce)
			assert.NotEmpty(t, ce.Errors[0].Message)
			assert.Contains(t, err.Error(), FormatCompileError("spec.rego", tt.want[0])[:len("spec.rego:5")])
		})
	}
}

// TestDisabledBuiltinsRefusedAtCompile: network and non-deterministic built-ins are
// gone from the capabilities, so policies calling them never compile.
func TestDisabledBuiltinsRefusedAtCompile(t *testing.T) {
	for _, call := range []string{
		`http.send({"method": "get", "url": "http://127.0.0.1:1"})`,
		`net.lookup_ip_addr("example.com")`,
		`opa.runtime()`,
		`time.now_ns()`,
		`rand.intn("x", 10)`,
		`uuid.rfc4122("x")`,
	} {
		t.Run(call, func(t *testing.T) {
			rego := "package p\n\ndeny contains msg if {\n\tx := " + call + "\n\tmsg := sprintf(\"%v\", [x])\n}\n"
			err := Compile(context.Background(), Policy{Name: "p", Rego: rego})
			var ce *CompileError
			require.True(t, errors.As(err, &ce), "%v", err)
			fn := call[:strings.Index(call, "(")]
			assert.Equal(t, int32(4), ce.Errors[0].Line)
			assert.Equal(t, fn+" is not allowed in Compositor policies: network, clock, randomness and runtime built-ins are disabled", ce.Errors[0].Message)
		})
	}
	assert.Contains(t, DisabledBuiltins(), "http.send")
	assert.NotContains(t, DisabledBuiltins(), "net.cidr_contains")
	assert.Empty(t, Capabilities().AllowNet)
}

func TestMatch(t *testing.T) {
	base := compositionRequest(map[string]any{})
	base.NamespaceLabels = map[string]string{"env": "prod"}
	tests := []struct {
		name  string
		match v1alpha1.Match
		req   func(r *Request)
		want  bool
	}{
		{"empty matches create", v1alpha1.Match{}, nil, true},
		{"default operations skip delete", v1alpha1.Match{}, func(r *Request) { r.Operation = "DELETE" }, false},
		{"explicit delete", v1alpha1.Match{Operations: []v1alpha1.Operation{"DELETE"}}, func(r *Request) { r.Operation = "DELETE" }, true},
		{"star operations", v1alpha1.Match{Operations: []v1alpha1.Operation{"*"}}, func(r *Request) { r.Operation = "CONNECT" }, true},
		{"audit matches any operation", v1alpha1.Match{Operations: []v1alpha1.Operation{"DELETE"}}, func(r *Request) { r.Operation = "" }, true},
		{"kind exact", v1alpha1.Match{Kinds: []v1alpha1.KindMatcher{{Group: "composition.krateo.io", Kind: "FireworksApp"}}}, nil, true},
		{"kind star", v1alpha1.Match{Kinds: []v1alpha1.KindMatcher{{Group: "*", Kind: "*"}}}, nil, true},
		{"kind empty group", v1alpha1.Match{Kinds: []v1alpha1.KindMatcher{{Kind: "FireworksApp"}}}, nil, true},
		{"kind other", v1alpha1.Match{Kinds: []v1alpha1.KindMatcher{{Group: "*", Kind: "CompositionDefinition"}}}, nil, false},
		{"kind other group", v1alpha1.Match{Kinds: []v1alpha1.KindMatcher{{Group: "core.krateo.io", Kind: "*"}}}, nil, false},
		{"kind version", v1alpha1.Match{Kinds: []v1alpha1.KindMatcher{{Kind: "*", Versions: []string{"v1-1-5"}}}}, nil, true},
		{"kind other version", v1alpha1.Match{Kinds: []v1alpha1.KindMatcher{{Kind: "*", Versions: []string{"v2-0-0"}}}}, nil, false},
		{"any of several kinds", v1alpha1.Match{Kinds: []v1alpha1.KindMatcher{{Kind: "X"}, {Kind: "FireworksApp", Versions: []string{"*"}}}}, nil, true},
		{"namespace listed", v1alpha1.Match{Namespaces: []string{"team-b", "team-a"}}, nil, true},
		{"namespace not listed", v1alpha1.Match{Namespaces: []string{"team-b"}}, nil, false},
		{"namespaces skip cluster-scoped", v1alpha1.Match{Namespaces: []string{"team-a"}}, func(r *Request) { r.Namespace = "" }, false},
		{"namespace selector", v1alpha1.Match{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}}}, nil, true},
		{"namespace selector miss", v1alpha1.Match{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "dev"}}}, nil, false},
		{"namespace selector expression", v1alpha1.Match{NamespaceSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "env", Operator: metav1.LabelSelectorOpIn, Values: []string{"prod", "staging"}}}}}, nil, true},
		{"namespace selector, labels unknown", v1alpha1.Match{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}}}, func(r *Request) { r.NamespaceLabels = nil }, false},
		{"label selector", v1alpha1.Match{LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "web"}}}, nil, true},
		{"label selector miss", v1alpha1.Match{LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "db"}}}, nil, false},
		{"label selector on old object", v1alpha1.Match{LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "db"}}}, func(r *Request) {
			r.Operation = "UPDATE"
			r.OldObject = map[string]any{"metadata": map[string]any{"labels": map[string]any{"tier": "db"}}}
		}, true},
		{"everything set and matching", v1alpha1.Match{
			Kinds:             []v1alpha1.KindMatcher{{Kind: "FireworksApp"}},
			Namespaces:        []string{"team-a"},
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}},
			LabelSelector:     &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "web"}},
			Operations:        []v1alpha1.Operation{"CREATE"},
		}, nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := compile(context.Background(), Policy{Name: "p", Rego: "package p\n\ndeny contains \"x\"\n", Match: tt.match})
			require.NoError(t, err)
			r := *base
			if tt.req != nil {
				tt.req(&r)
			}
			assert.Equal(t, tt.want, c.matches(&r))
		})
	}
}

func TestInvalidMatchIsACompileError(t *testing.T) {
	p := Policy{Name: "p", Rego: "package p\n\ndeny contains \"x\"\n", Action: "block", Target: "cluster",
		Match: v1alpha1.Match{
			Operations:    []v1alpha1.Operation{"PATCH"},
			LabelSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "a", Operator: "Near"}}},
		}}
	var ce *CompileError
	require.True(t, errors.As(Compile(context.Background(), p), &ce))
	assert.Len(t, ce.Errors, 4)
}

// TestInputDocument: the document a policy sees is the one
// docs/admission.md#the-policy-input-document describes.
func TestInputDocument(t *testing.T) {
	ctx := context.Background()
	e := newTestEngine(t, Options{})
	require.NoError(t, e.Set(ctx, Policy{Name: "echo", Action: v1alpha1.EnforcementWarn, Parameters: map[string]any{"limit": 3}, Rego: `package echo

warn contains sprintf("%s %s/%s/%s %s %s/%s by %s in %v old=%v limit=%v chart=%s@%s rendered=%v", [
	input.review.operation,
	input.review.kind.group, input.review.kind.version, input.review.kind.kind,
	input.review.resource.resource,
	input.review.namespace, input.review.name,
	input.review.userInfo.username, input.review.userInfo.groups,
	input.review.oldObject,
	input.parameters.limit,
	input.definition.url, input.definition.version,
	object.get(input, "rendered", "none"),
])

warn contains input.review.object.spec.image.registry
`}))
	r := compositionRequest(map[string]any{"image": map[string]any{"registry": "docker.io"}})
	r.UserInfo = authenticationv1.UserInfo{Username: "alice", Groups: []string{"devs"}}
	r.Definition = &ChartRef{URL: "oci://registry.example.com/charts/fireworks-app", Version: "1.1.5"}
	vs := e.Evaluate(ctx, r)
	assert.Equal(t, []string{
		`CREATE composition.krateo.io/v1-1-5/FireworksApp fireworksapps team-a/x by alice in ["devs"] old=null limit=3 chart=oci://registry.example.com/charts/fireworks-app@1.1.5 rendered=none [policy echo]`,
		"docker.io [policy echo]",
	}, FormatLines(vs))
	// As warnings, the same lines with the policy first, whole: they fit in MaxWarningLength.
	assert.Equal(t, []string{
		`[policy echo] CREATE composition.krateo.io/v1-1-5/FireworksApp fireworksapps team-a/x by alice in ["devs"] old=null limit=3 chart=oci://registry.example.com/charts/fireworks-app@1.1.5 rendered=none`,
		"[policy echo] docker.io",
	}, FormatWarnings(vs))
}

// The input is converted as policies read it; policies that read all of it (walk it,
// compare it, count it, marshal it) see the whole document, and the same one each.
func TestPoliciesThatReadTheWholeInput(t *testing.T) {
	ctx := context.Background()
	e := newTestEngine(t, Options{})
	whole := `package whole

deny contains sprintf("%v at %v", [value, path]) if {
	walk(input.review.object, [path, value])
	value == "forbidden"
}

deny contains sprintf("%d keys in metadata, labels %s", [count(input.review.object.metadata), json.marshal(input.review.object.metadata.labels)]) if true

deny contains "the object is not what it was" if input.review.object != input.review.object

deny contains sprintf("input has %v", [sort(object.keys(input))]) if true
`
	require.NoError(t, e.Set(ctx, Policy{Name: "whole", Action: v1alpha1.EnforcementDeny, Rego: whole}))
	require.NoError(t, e.Set(ctx, Policy{Name: "again", Action: v1alpha1.EnforcementDeny, Rego: strings.ReplaceAll(whole, "package whole", "package again")}))
	r := compositionRequest(map[string]any{"a": []any{int64(1), map[string]any{"b": "forbidden"}}})
	r.Definition = &ChartRef{URL: "oci://r/c", Version: "1"}
	vs := e.Evaluate(ctx, r)
	want := []string{
		`3 keys in metadata, labels {"tier":"web"}`,
		`forbidden at ["spec", "a", 1, "b"]`,
		`input has ["definition", "parameters", "review"]`,
	}
	var got []string
	for _, v := range vs {
		if v.Policy == "whole" {
			got = append(got, v.Message)
		}
	}
	assert.ElementsMatch(t, want, got)
	assert.Len(t, vs, 2*len(want), "the second policy sees the same: %v", FormatLines(vs))
}

func TestEnforcementActions(t *testing.T) {
	ctx := context.Background()
	e := newTestEngine(t, Options{})
	params := map[string]any{"allowed": []any{"registry.example.com"}}
	for _, a := range []v1alpha1.EnforcementAction{v1alpha1.EnforcementDeny, v1alpha1.EnforcementWarn, v1alpha1.EnforcementDryRun} {
		require.NoError(t, e.Set(ctx, Policy{Name: "registries-" + string(a), Rego: registryPolicy, Action: a, Parameters: params}))
	}
	require.NoError(t, e.Set(ctx, Policy{Name: "advice", Rego: "package advice\n\nwarn contains \"consider pinning the image by digest\"\n"}))

	d, err := NewJudge(JudgeOptions{Engine: e, Schemas: noSchemas{}}).Decide(ctx, compositionRequest(map[string]any{"image": map[string]any{"registry": "docker.io"}}))
	require.NoError(t, err)
	assert.True(t, d.Denied())
	assert.Equal(t, `spec.image.registry: registry "docker.io" is not allowed [policy registries-deny]`, d.Message())
	assert.Equal(t, []string{
		`[policy advice] consider pinning the image by digest`,
		`[policy registries-warn] spec.image.registry: registry "docker.io" is not allowed`,
	}, d.Warnings())
	require.Len(t, d.DryRun(), 1)
	assert.Equal(t, "registries-dryrun", d.DryRun()[0].Policy)

	d, err = NewJudge(JudgeOptions{Engine: e, Schemas: noSchemas{}}).Decide(ctx, compositionRequest(map[string]any{"image": map[string]any{"registry": "registry.example.com"}}))
	require.NoError(t, err)
	assert.False(t, d.Denied())
	assert.Equal(t, "", d.Message())
	assert.Nil(t, d.Err(schema.GroupKind{Group: "composition.krateo.io", Kind: "FireworksApp"}, "x"))
}

// slowPolicy would run for hours: ten billion iterations of a comprehension.
const slowPolicy = `package slow

deny contains "too many" if {
	count([x | some i in numbers.range(1, 100000); some j in numbers.range(1, 100000); x := i * j]) > 0
}
`

func TestDeadlineCutsOffExpensivePolicies(t *testing.T) {
	ctx := context.Background()
	t.Run("fail closed", func(t *testing.T) {
		e := newTestEngine(t, Options{Timeout: 100 * time.Millisecond})
		require.NoError(t, e.Set(ctx, Policy{Name: "slow", Rego: slowPolicy}))
		require.NoError(t, e.Set(ctx, Policy{Name: "zz-after", Rego: "package after\n\ndeny contains \"never reached\"\n"}))
		vs := e.Evaluate(ctx, compositionRequest(map[string]any{}))
		d := Decision{Violations: vs}
		assert.True(t, d.Denied())
		assert.Equal(t, strings.Join([]string{
			"evaluation did not finish within 100ms and was stopped (denied: policies fail closed) [policy slow]",
			"not evaluated: the request's evaluation deadline of 100ms passed while other policies ran (denied: policies fail closed) [policy zz-after]",
		}, "\n"), d.Message())
	})
	t.Run("fail open", func(t *testing.T) {
		e := newTestEngine(t, Options{Timeout: 100 * time.Millisecond, FailOpen: true})
		require.NoError(t, e.Set(ctx, Policy{Name: "slow", Rego: slowPolicy}))
		vs := e.Evaluate(ctx, compositionRequest(map[string]any{}))
		d := Decision{Violations: vs}
		assert.False(t, d.Denied())
		assert.Equal(t, []string{"[policy slow] evaluation did not finish within 100ms and was stopped (admitted: policies fail open)"}, d.Warnings())
	})
	t.Run("caller's deadline", func(t *testing.T) {
		e := newTestEngine(t, Options{Timeout: time.Hour})
		require.NoError(t, e.Set(ctx, Policy{Name: "slow", Rego: slowPolicy}))
		cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		vs := e.Evaluate(cctx, compositionRequest(map[string]any{}))
		require.Len(t, vs, 1)
		assert.Equal(t, v1alpha1.EnforcementDeny, vs[0].Action)
	})
}

func TestRuntimeErrorFailsClosed(t *testing.T) {
	ctx := context.Background()
	e := newTestEngine(t, Options{})
	// Two values for one complete rule is a run-time conflict.
	require.NoError(t, e.Set(ctx, Policy{Name: "conflict", Rego: "package conflict\n\nx := 1 if input.review.name\n\nx := 2 if input.review.namespace\n\ndeny contains \"x\" if x\n"}))
	vs := e.Evaluate(ctx, compositionRequest(nil))
	require.Len(t, vs, 1)
	assert.Contains(t, vs[0].Message, "evaluation failed: ")
	assert.Equal(t, v1alpha1.EnforcementDeny, vs[0].Action)
}

// TestBrokenUpdateKeepsLastGood: a policy that stops compiling stays in force in its
// last good version, for single updates and for a whole-origin sync.
func TestBrokenUpdateKeepsLastGood(t *testing.T) {
	ctx := context.Background()
	e := newTestEngine(t, Options{})
	good := Policy{Name: "p", Origin: OriginObject, Rego: "package p\n\ndeny contains \"v1\"\n"}
	require.NoError(t, e.Set(ctx, good))
	broken := good
	broken.Rego = "package p\n\ndeny contains \"v2\" if {\n"
	require.ErrorIs(t, e.Set(ctx, broken), ErrCompile)

	messages := func() []string {
		vs := e.Evaluate(ctx, compositionRequest(nil))
		var out []string
		for _, v := range vs {
			out = append(out, v.Message)
		}
		return out
	}
	assert.Equal(t, []string{"v1"}, messages())

	other := Policy{Name: "q", Rego: "package q\n\ndeny contains \"q1\"\n"}
	err := e.Sync(ctx, OriginObject, []Policy{broken, other})
	require.ErrorIs(t, err, ErrCompile)
	assert.Equal(t, []string{"v1", "q1"}, messages())

	// A sync without p removes it; a kept name survives without being compiled again.
	require.NoError(t, e.Sync(ctx, OriginObject, []Policy{other}, "p"))
	assert.Equal(t, []string{"v1", "q1"}, messages())
	require.NoError(t, e.Sync(ctx, OriginObject, nil))
	assert.Empty(t, messages())

	e.Remove(OriginObject, "nothing") // harmless
	require.NoError(t, e.Set(ctx, good))
	e.Remove(OriginObject, "p")
	assert.Empty(t, messages())
}

func TestOriginsDoNotReplaceEachOther(t *testing.T) {
	ctx := context.Background()
	e := newTestEngine(t, Options{})
	require.NoError(t, e.Set(ctx, Policy{Name: "p", Origin: OriginObject, Rego: "package p\n\ndeny contains \"object\"\n"}))
	require.NoError(t, e.Sync(ctx, OriginDir, []Policy{{Name: "p", Rego: "package p\n\ndeny contains \"dir\"\n"}}))
	vs := e.Evaluate(ctx, compositionRequest(nil))
	assert.Len(t, vs, 2)
	assert.Len(t, e.Policies(), 2)
}

// TestConcurrentEvaluateAndUpdate runs under -race: evaluations never see a half-made
// set and never block on updates.
func TestConcurrentEvaluateAndUpdate(t *testing.T) {
	ctx := context.Background()
	e := newTestEngine(t, Options{})
	params := map[string]any{"allowed": []any{"registry.example.com"}}
	require.NoError(t, e.Set(ctx, Policy{Name: "registries", Rego: registryPolicy, Parameters: params}))
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 50 {
				vs := e.Evaluate(ctx, compositionRequest(map[string]any{"image": map[string]any{"registry": fmt.Sprintf("r%d-%d", w, i)}}))
				assert.Len(t, vs, 1)
			}
		}()
	}
	for i := range 20 {
		p := Policy{Name: "registries", Rego: registryPolicy, Parameters: params}
		if i%2 == 1 {
			p.Rego = "package broken\n\ndeny contains"
		}
		_ = e.Set(ctx, p)
	}
	wg.Wait()
}

func TestFromCompositionPolicy(t *testing.T) {
	obj := &v1alpha1.CompositionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "allowed-registries"},
		Spec: v1alpha1.CompositionPolicySpec{
			Rego:              registryPolicy,
			EnforcementAction: v1alpha1.EnforcementDeny,
			Parameters:        &apiextensionsv1.JSON{Raw: []byte(`{"allowed":["registry.example.com"]}`)},
		},
	}
	p, err := FromCompositionPolicy(obj)
	require.NoError(t, err)
	assert.Equal(t, OriginObject, p.Origin)
	assert.Equal(t, "spec.rego", p.File)
	e := newTestEngine(t, Options{})
	require.NoError(t, e.Set(context.Background(), p))
	vs := e.Evaluate(context.Background(), compositionRequest(map[string]any{"image": map[string]any{"registry": "docker.io"}}))
	assert.Equal(t, []string{`spec.image.registry: registry "docker.io" is not allowed [policy allowed-registries]`}, FormatLines(vs))

	obj.Spec.Parameters = &apiextensionsv1.JSON{Raw: []byte(`[1]`)}
	_, err = FromCompositionPolicy(obj)
	assert.ErrorIs(t, err, ErrCompile)
}

func TestCompileErrorsOf(t *testing.T) {
	e := newTestEngine(t, Options{})
	err := e.Sync(context.Background(), OriginDir, []Policy{
		{Name: "a", Rego: "package a\n\ndeny contains x if {\n"},
		{Name: "b", Rego: "package b\n\nallow := true\n"},
	})
	errs := CompileErrorsOf(fmt.Errorf("reloading: %w", err))
	require.Len(t, errs, 2)
	assert.Equal(t, int32(4), errs[0].Line)
	assert.Equal(t, int32(1), errs[1].Line)
	assert.Equal(t, []v1alpha1.CompileError{{Message: "boom"}}, CompileErrorsOf(errors.New("boom")))
	assert.Nil(t, CompileErrorsOf(nil))
}
