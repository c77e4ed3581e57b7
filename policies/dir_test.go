package policies

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/compositor-dev/compositor/api/policy/v1alpha1"
)

const metadataPolicy = `# METADATA
# title: Allowed registries
# custom:
#   match:
#     kinds:
#       - kind: FireworksApp
#     namespaces: [team-a]
#   enforcementAction: warn
#   target: object
#   parameters:
#     allowed: [registry.example.com]
#   severity: high
package registries

deny contains {"msg": sprintf("registry %q is not allowed", [r]), "path": "spec.image.registry"} if {
	r := input.review.object.spec.image.registry
	not r in input.parameters.allowed
}
`

const plainPolicy = `package replicas

deny contains {"msg": "must be at most 5", "path": "spec.replicaCount"} if {
	input.review.object.spec.replicaCount > 5
}
`

const plainSidecar = `match:
  operations: [CREATE]
enforcementAction: dryrun
`

func TestParsePolicyFile(t *testing.T) {
	p, err := ParsePolicyFile("registries", "registries.rego", []byte(metadataPolicy), nil)
	require.NoError(t, err)
	assert.Equal(t, v1alpha1.EnforcementWarn, p.Action)
	assert.Equal(t, v1alpha1.TargetObject, p.Target)
	assert.Equal(t, []string{"team-a"}, p.Match.Namespaces)
	assert.Equal(t, "FireworksApp", p.Match.Kinds[0].Kind)
	assert.Equal(t, map[string]any{"allowed": []any{"registry.example.com"}}, p.Parameters)

	p, err = ParsePolicyFile("replicas", "replicas.rego", []byte(plainPolicy), []byte(plainSidecar))
	require.NoError(t, err)
	assert.Equal(t, v1alpha1.EnforcementDryRun, p.Action)
	assert.Equal(t, []v1alpha1.Operation{"CREATE"}, p.Match.Operations)

	p, err = ParsePolicyFile("replicas", "replicas.rego", []byte(plainPolicy), nil)
	require.NoError(t, err)
	assert.Equal(t, v1alpha1.EnforcementAction(""), p.Action, "the default (deny) is applied at compile time")

	_, err = ParsePolicyFile("x", "x.rego", []byte(metadataPolicy), []byte(plainSidecar))
	assert.ErrorIs(t, err, ErrInvalidMetadata, "both places")
	_, err = ParsePolicyFile("x", "x.rego", []byte(plainPolicy), []byte("enforcmentAction: warn\n"))
	assert.ErrorIs(t, err, ErrInvalidMetadata, "a typo in the sidecar")
	_, err = ParsePolicyFile("x", "x.rego", []byte("# METADATA\n# custom:\n#   match:\n#     kindz: []\npackage x\n"), nil)
	assert.ErrorIs(t, err, ErrInvalidMetadata, "a typo inside match")
	_, err = ParsePolicyFile("x", "x.rego", []byte("# METADATA\n# custom: [\npackage x\n"), nil)
	assert.Error(t, err, "malformed METADATA YAML")
	_, err = ParsePolicyFile("x", "x.rego", []byte("package x\n\ndeny contains if"), nil)
	assert.ErrorIs(t, err, ErrCompile)
}

func writeFile(t *testing.T, dir, name, content string) {
	t.Helper()
	// Write then rename, as editors and ConfigMap updates do, so a reader never sees a
	// half-written file.
	tmp := filepath.Join(dir, "."+name+".tmp")
	require.NoError(t, os.WriteFile(tmp, []byte(content), 0o600))
	require.NoError(t, os.Rename(tmp, filepath.Join(dir, name)))
}

func TestLoadDir(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "registries.rego", metadataPolicy)
	writeFile(t, dir, "replicas.rego", plainPolicy)
	writeFile(t, dir, "replicas.yaml", plainSidecar)
	writeFile(t, dir, "replicas_test.rego", "package replicas_test\n\ntest_x if true\n")
	writeFile(t, dir, "broken.rego", "package broken\n\ndeny contains if {")
	writeFile(t, dir, "notes.txt", "not a policy")
	d, err := LoadDir(dir)
	require.NoError(t, err)
	var names []string
	for _, p := range d.Policies {
		names = append(names, p.Name)
		assert.Equal(t, OriginDir, p.Origin)
	}
	assert.Equal(t, []string{"registries", "replicas"}, names)
	require.Contains(t, d.Broken, "broken")
	assert.ErrorIs(t, d.Err(), ErrCompile)

	_, err = LoadDir(filepath.Join(dir, "missing"))
	assert.ErrorIs(t, err, os.ErrNotExist)
}

// TestWatchDir: the directory is loaded, reloaded on change, a broken edit keeps the
// last good version, and a deleted file stops being enforced.
func TestWatchDir(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir := t.TempDir()
	writeFile(t, dir, "replicas.rego", plainPolicy)

	e := newTestEngine(t, Options{})
	reloads := make(chan error, 16)
	done := make(chan error, 1)
	go func() { done <- WatchDir(ctx, e, dir, func(err error) { reloads <- err }) }()

	// waitFor reads reloads until one satisfies ok: a slow machine may split one file
	// update into two reloads, the first of which sees the old state.
	waitFor := func(ok func(error) bool) error {
		t.Helper()
		timeout := time.After(30 * time.Second)
		for {
			select {
			case err := <-reloads:
				if ok(err) {
					return err
				}
			case <-timeout:
				require.FailNow(t, "no reload with the expected outcome")
				return nil
			}
		}
	}
	success := func(err error) bool { return err == nil }
	is := func(target error) func(error) bool { return func(err error) bool { return errors.Is(err, target) } }
	messages := func(replicas int) []string {
		vs := e.Evaluate(ctx, compositionRequest(map[string]any{"replicaCount": replicas}))
		return FormatLines(vs)
	}

	require.NoError(t, waitFor(success))
	assert.Equal(t, []string{"spec.replicaCount: must be at most 5 [policy replicas]"}, messages(6))

	writeFile(t, dir, "replicas.yaml", "enforcementAction: warn\n")
	for len(warnings(t, e, 6)) != 1 {
		waitFor(success)
	}

	writeFile(t, dir, "replicas.rego", "package replicas\n\ndeny contains \"x\" if {\n")
	waitFor(is(ErrCompile))
	assert.Equal(t, []string{"spec.replicaCount: must be at most 5 [policy replicas]"}, messages(6), "last good version stays")

	writeFile(t, dir, "replicas.rego", plainPolicy)
	waitFor(success)
	writeFile(t, dir, "replicas.yaml", "enforcementAction: [\n")
	waitFor(is(ErrInvalidMetadata))
	assert.Len(t, warnings(t, e, 6), 1, "last good version stays")

	require.NoError(t, os.Remove(filepath.Join(dir, "replicas.rego")))
	require.NoError(t, os.Remove(filepath.Join(dir, "replicas.yaml")))
	for len(messages(6)) != 0 {
		waitFor(success)
	}

	cancel()
	assert.True(t, errors.Is(<-done, context.Canceled))
}

func warnings(t *testing.T, e *Engine, replicas int) []string {
	t.Helper()
	vs := e.Evaluate(context.Background(), compositionRequest(map[string]any{"replicaCount": replicas}))
	return FormatWarnings(vs)
}

func TestRunTests(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "replicas.rego", plainPolicy)
	writeFile(t, dir, "replicas.yaml", plainSidecar) // not read as data
	writeFile(t, dir, "replicas_test.rego", `package replicas_test

import data.replicas

test_six_denied if {
	count(replicas.deny) == 1 with input as {"review": {"object": {"spec": {"replicaCount": 6}}}}
}

test_wrong if {
	print("looking at five")
	count(replicas.deny) == 1 with input as {"review": {"object": {"spec": {"replicaCount": 5}}}}
}

todo_test_later if true
`)
	results, err := RunTests(context.Background(), dir, TestOptions{})
	require.NoError(t, err)
	require.Len(t, results, 3)
	byName := map[string]TestResult{}
	for _, r := range results {
		byName[r.Name] = r
	}
	assert.True(t, byName["test_six_denied"].Pass)
	assert.False(t, byName["test_wrong"].Pass)
	assert.Contains(t, string(byName["test_wrong"].Output), "looking at five")
	assert.True(t, byName["todo_test_later"].Skip)
	assert.Equal(t, "replicas_test.rego", byName["test_wrong"].File)
	assert.Contains(t, byName["test_wrong"].String(), "FAIL: data.replicas_test.test_wrong")

	results, err = RunTests(context.Background(), dir, TestOptions{Run: "six"})
	require.NoError(t, err)
	require.Len(t, results, 1)
	assert.True(t, results[0].Pass)

	// A single file can be given; here the policy it tests is not loaded.
	results, err = RunTests(context.Background(), filepath.Join(dir, "replicas_test.rego"), TestOptions{Run: "six"})
	require.NoError(t, err)
	require.Len(t, results, 1)
	assert.False(t, results[0].Pass)
}

func TestRunTestsUsesServerCapabilities(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "net.rego", "package net_policy\n\ndeny contains \"x\" if {\n\thttp.send({\"method\": \"get\", \"url\": \"http://127.0.0.1:1\"})\n}\n")
	writeFile(t, dir, "net_test.rego", "package net_policy_test\n\nimport data.net_policy\n\ntest_x if count(net_policy.deny) == 0\n")
	_, err := RunTests(context.Background(), dir, TestOptions{})
	var ce *CompileError
	require.True(t, errors.As(err, &ce), "%v", err)
	assert.Equal(t, "net.rego", ce.File)
	assert.Equal(t, int32(4), ce.Errors[0].Line)
	assert.Contains(t, ce.Errors[0].Message, "http.send is not allowed")
}

func TestRunTestsStrict(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "unused.rego", "package unused\n\ndeny contains \"x\" if {\n\tx := 1\n\tinput.a\n}\n")
	_, err := RunTests(context.Background(), dir, TestOptions{})
	require.NoError(t, err)
	_, err = RunTests(context.Background(), dir, TestOptions{Strict: true})
	assert.ErrorIs(t, err, ErrCompile)
}
