package app

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/compositor-dev/compositor/policies"
)

const replicasPolicy = `package replicas

deny contains "at least 2 replicas" if input.review.object.spec.replicaCount < 2
`

const replicasTests = `package replicas_test

import data.replicas

test_one_replica_denied if {
	count(replicas.deny) == 1 with input as {"review": {"object": {"spec": {"replicaCount": 1}}}}
}

test_wrong_expectation if {
	print("replicaCount is", 3)
	count(replicas.deny) == 1 with input as {"review": {"object": {"spec": {"replicaCount": 3}}}}
}

todo_test_later if {
	false
}
`

// policyTestDir writes files into a temporary directory.
func policyTestDir(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644))
	}
	return dir
}

// durations makes the timing in test lines comparable.
var durations = regexp.MustCompile(`\([0-9.]+[µnm]?s\)`)

func TestPolicyTestPassAndFail(t *testing.T) {
	dir := policyTestDir(t, map[string]string{"replicas.rego": replicasPolicy, "replicas_test.rego": replicasTests})
	stdout, stderr, err := runCLI(t, "", "policy", "test", dir)
	require.ErrorIs(t, err, ErrTestsFailed)
	assert.Equal(t, ExitFailure, ExitCode(err))
	assert.Equal(t, strings.Join([]string{
		"PASS: data.replicas_test.test_one_replica_denied (D)",
		"FAIL: data.replicas_test.test_wrong_expectation (D)",
		"  at " + filepath.Join(dir, "replicas_test.rego") + ":9",
		"  replicaCount is 3",
		"SKIP: data.replicas_test.todo_test_later (D)",
		"1 passed, 1 failed, 1 skipped",
		"",
	}, "\n"), durations.ReplaceAllString(stdout, "(D)"))
	assert.Contains(t, stderr, "Error: policy tests failed: 1 of 3")
}

func TestPolicyTestRunAndVerbose(t *testing.T) {
	dir := policyTestDir(t, map[string]string{"replicas.rego": replicasPolicy, "replicas_test.rego": replicasTests})
	stdout, _, err := runCLI(t, "", "policy", "test", dir, "--run", "one_replica", "-v")
	require.NoError(t, err)
	assert.Equal(t, strings.Join([]string{
		"PASS: data.replicas_test.test_one_replica_denied (D)",
		"  at " + filepath.Join(dir, "replicas_test.rego") + ":5",
		"1 passed, 0 failed",
		"",
	}, "\n"), durations.ReplaceAllString(stdout, "(D)"))

	_, _, err = runCLI(t, "", "policy", "test", dir, "--run", "no_such_test")
	require.ErrorIs(t, err, ErrTestsFailed, "a filter that selects nothing is a mistake, not a pass")
}

func TestPolicyTestBuiltinsPass(t *testing.T) {
	dir := filepath.Join("..", "..", "..", "policies", "builtin")
	stdout, _, err := runCLI(t, "", "policy", "test", dir, "--strict")
	require.NoError(t, err, stdout)
	lines := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
	summary := lines[len(lines)-1]
	assert.Regexp(t, `^[1-9][0-9]* passed, 0 failed$`, summary)
	for _, l := range lines[:len(lines)-1] {
		assert.True(t, strings.HasPrefix(l, "PASS: data.compositor.builtin."), l)
	}
	// Every built-in policy has tests.
	for _, id := range policies.BuiltinIDs() {
		assert.Contains(t, stdout, "PASS: data.compositor.builtin."+strings.ReplaceAll(id, "-", "_")+"_test.")
	}
}

func TestPolicyTestServerCapabilities(t *testing.T) {
	dir := policyTestDir(t, map[string]string{"fetch_test.rego": `package fetch_test

test_fetch if {
	http.send({"method": "GET", "url": "https://example.com"}).status_code == 200
}
`})
	_, _, err := runCLI(t, "", "policy", "test", dir)
	require.ErrorIs(t, err, policies.ErrCompile, "http.send is refused as the server refuses it")
	assert.Contains(t, err.Error(), "fetch_test.rego:4")
	assert.Equal(t, ExitFailure, ExitCode(err))
}

func TestPolicyTestUsage(t *testing.T) {
	_, stderr, err := runCLI(t, "", "policy", "test")
	require.ErrorIs(t, err, ErrUsage)
	assert.Equal(t, ExitUsage, ExitCode(err))
	assert.Contains(t, stderr, "Error: missing argument DIR")

	_, _, err = runCLI(t, "", "policy", "test", "a", "b")
	require.ErrorIs(t, err, ErrUsage)

	_, _, err = runCLI(t, "", "policy", "test", t.TempDir(), "--timeout", "soon")
	require.ErrorIs(t, err, ErrUsage)

	_, _, err = runCLI(t, "", "policy", "test", filepath.Join(t.TempDir(), "missing"))
	require.Error(t, err)
	assert.Equal(t, ExitFailure, ExitCode(err))
}
