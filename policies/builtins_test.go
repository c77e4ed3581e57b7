package policies

import (
	"context"
	"io/fs"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/compositor-dev/compositor/api/policy/v1alpha1"
	"github.com/compositor-dev/compositor/policies/builtin"
)

// TestBuiltinRegoTests runs every built-in's _test.rego with OPA's tester, under the
// server's capabilities and in strict mode (`opa check --strict`).
func TestBuiltinRegoTests(t *testing.T) {
	results, err := RunTestsFS(context.Background(), builtin.FS, TestOptions{Strict: true})
	require.NoError(t, err)
	require.NotEmpty(t, results)
	tested := map[string]bool{}
	for _, r := range results {
		assert.True(t, r.Pass, "%s", r)
		assert.NoError(t, r.Err)
		tested[strings.TrimSuffix(r.File, "_test.rego")] = true
	}
	for _, id := range BuiltinIDs() {
		assert.True(t, tested[id], "built-in %s has no passing _test.rego", id)
	}
}

func TestBuiltinsEachHaveATestAndMetadata(t *testing.T) {
	ids := BuiltinIDs()
	assert.Equal(t, []string{"chart-url-scheme", "credentials-namespace", "exact-chart-version", "no-insecure-tls", "require-chart-verification"}, ids)
	ps, err := SelectBuiltins(OptInBuiltinIDs(), nil)
	require.NoError(t, err)
	require.Len(t, ps, len(ids))
	for _, p := range ps {
		_, err := fs.Stat(builtin.FS, p.Name+"_test.rego")
		assert.NoError(t, err, "%s needs a _test.rego", p.Name)
		assert.Equal(t, OriginBuiltin, p.Origin)
		require.Len(t, p.Match.Kinds, 1, p.Name)
		assert.Equal(t, "CompositionDefinition", p.Match.Kinds[0].Kind)
		assert.NoError(t, Compile(context.Background(), p))
	}
}

func TestBuiltinsSwitchOff(t *testing.T) {
	ps, err := Builtins("no-insecure-tls", "chart-url-scheme")
	require.NoError(t, err)
	var names []string
	for _, p := range ps {
		names = append(names, p.Name)
	}
	assert.Equal(t, []string{"credentials-namespace", "exact-chart-version"}, names)

	_, err = Builtins("no-such-policy")
	assert.ErrorIs(t, err, ErrUnknownBuiltin)
	_, err = NewEngine(context.Background(), Options{DisabledBuiltins: []string{"typo"}})
	assert.ErrorIs(t, err, ErrUnknownBuiltin)
}

// require-chart-verification is off unless switched on; switching on a policy that is
// on by default, or one that does not exist, is a mistake the flag reports.
func TestBuiltinsSwitchOn(t *testing.T) {
	names := func(ps []Policy) (out []string) {
		for _, p := range ps {
			out = append(out, p.Name)
		}
		return out
	}
	ps, err := Builtins()
	require.NoError(t, err)
	assert.NotContains(t, names(ps), "require-chart-verification")

	ps, err = SelectBuiltins([]string{"require-chart-verification"}, nil)
	require.NoError(t, err)
	assert.Contains(t, names(ps), "require-chart-verification")

	ps, err = SelectBuiltins([]string{"require-chart-verification"}, []string{"require-chart-verification"})
	require.NoError(t, err)
	assert.NotContains(t, names(ps), "require-chart-verification", "disabled wins")

	for _, bad := range []string{"no-insecure-tls", "typo"} {
		_, err = SelectBuiltins([]string{bad}, nil)
		assert.ErrorIs(t, err, ErrUnknownBuiltin, bad)
	}

	ctx := context.Background()
	unverified := definitionRequest(map[string]any{"url": "oci://registry.example.com/charts/app", "version": "1.0.0"}, "team-a")
	e, err := NewEngine(ctx, Options{})
	require.NoError(t, err)
	assert.Empty(t, e.Evaluate(ctx, unverified), "off by default")
	e, err = NewEngine(ctx, Options{EnabledBuiltins: []string{"require-chart-verification"}})
	require.NoError(t, err)
	vs := e.Evaluate(ctx, unverified)
	require.Len(t, vs, 1)
	assert.Equal(t, "spec.chart.verify", vs[0].Path)
}

func definitionRequest(chart map[string]any, namespace string) *Request {
	return &Request{
		Operation: "CREATE",
		Kind:      gvk("core.krateo.io", "v1alpha1", "CompositionDefinition"),
		Namespace: namespace,
		Name:      "fireworks",
		Object: map[string]any{
			"apiVersion": "core.krateo.io/v1alpha1",
			"kind":       "CompositionDefinition",
			"metadata":   map[string]any{"name": "fireworks", "namespace": namespace},
			"spec":       map[string]any{"chart": chart},
		},
	}
}

// TestBuiltinsThroughTheEngine: the built-ins deny definitions as the webhook will
// show it, and switching one off lets its violation through.
func TestBuiltinsThroughTheEngine(t *testing.T) {
	ctx := context.Background()
	bad := definitionRequest(map[string]any{
		"url":                   "http://charts.example.com",
		"version":               "^1.1",
		"insecureSkipVerifyTLS": true,
		"credentials": map[string]any{
			"username":    "u",
			"passwordRef": map[string]any{"name": "repo", "namespace": "kube-system", "key": "password"},
		},
	}, "team-a")
	e, err := NewEngine(ctx, Options{})
	require.NoError(t, err)
	d, err := NewJudge(JudgeOptions{Engine: e, Schemas: noSchemas{}}).Decide(ctx, bad)
	require.NoError(t, err)
	assert.True(t, d.Denied())
	assert.Equal(t, strings.Join([]string{
		`spec.chart.url: chart URL "http://charts.example.com" must use oci://, https:// or imported://; plain http:// is allowed only to a loopback address [policy chart-url-scheme]`,
		`spec.chart.credentials.passwordRef.namespace: the password Secret must be in the definition's namespace "team-a", not in "kube-system" [policy credentials-namespace]`,
		`spec.chart.version: chart version "^1.1" must be an exact version such as 1.2.3, not a range [policy exact-chart-version]`,
		`spec.chart.insecureSkipVerifyTLS: skipping TLS verification of the chart server is not allowed; give the server a certificate the cluster trusts [policy no-insecure-tls]`,
	}, "\n"), d.Message())
	assert.Equal(t, "Forbidden", string(d.Reason()))

	e2, err := NewEngine(ctx, Options{DisabledBuiltins: []string{"no-insecure-tls"}})
	require.NoError(t, err)
	vs := e2.Evaluate(ctx, bad)
	assert.Len(t, vs, 3)
	for _, v := range vs {
		assert.NotEqual(t, "no-insecure-tls", v.Policy)
	}

	good := definitionRequest(map[string]any{"url": "oci://registry.example.com/charts/fireworks-app", "version": "1.1.5"}, "team-a")
	vs = e.Evaluate(ctx, good)
	assert.Empty(t, vs)
	assert.Equal(t, v1alpha1.EnforcementDeny, e.Policies()[0].Action)
}
