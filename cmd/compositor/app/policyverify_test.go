package app

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// gatekeeperSuites holds the suites the gatekeeper package's tests run: suites/ all
// pass (or are unsupported or skipped), failing/ has failing cases.
var gatekeeperSuites = filepath.Join("..", "..", "..", "policies", "gatekeeper", "testdata")

func TestPolicyVerifyDirectory(t *testing.T) {
	dir := filepath.Join(gatekeeperSuites, "suites")
	var out bytes.Buffer
	err := RunPolicyVerify(context.Background(), &out, &PolicyVerifyOptions{Paths: []string{dir}})
	require.NoError(t, err)
	suite := func(name string) string { return filepath.Join(dir, name, "suite.yaml") }
	assert.Equal(t, strings.Join([]string{
		"UNSUP " + suite("celonly") + "  passed 0, failed 0, unsupported 1, skipped 0",
		"    unsupported tier-label/no-tier: template template.yaml: not supported: the template has only K8sNativeValidation (CEL) code, and Compositor runs the Rego of templates",
		"ok    " + suite("imageprefix") + "  passed 2, failed 0, unsupported 0, skipped 0",
		"ok    " + suite("requiredteam") + "  passed 10, failed 0, unsupported 1, skipped 1",
		"    skipped     team-label/not-yet: skip: true",
		"    unsupported expanded-workloads/deployment-pod: expansion: ExpansionTemplates are not read (Compositor expands the pod templates of workloads itself)",
		"ok    " + suite("skipped") + "  passed 0, failed 0, unsupported 0, skipped 2",
		"    skipped     team-label/team-present: skip: true",
		"    skipped     team-label/team-missing: skip: true",
		"ok    " + suite("uniqueslot") + "  passed 4, failed 0, unsupported 0, skipped 0",
		"5 suites: 16 cases passed, 0 failed, 2 unsupported, 3 skipped",
		"",
	}, "\n"), out.String())
}

func TestPolicyVerifyFailingCases(t *testing.T) {
	suite := filepath.Join(gatekeeperSuites, "failing", "suite.yaml")
	samples := filepath.Join(gatekeeperSuites, "failing", "..", "suites", "requiredteam", "samples")
	stdout, _, err := runCLI(t, "", "policy", "verify", suite)
	require.ErrorIs(t, err, ErrSuitesFailed)
	assert.Equal(t, ExitFailure, ExitCode(err))
	assert.Equal(t, strings.Join([]string{
		"FAIL  " + suite + "  passed 1, failed 8, unsupported 0, skipped 0",
		"    failed      team-label/wrong-expectation: assertion 0: got no violations, want at least one; messages []",
		`    failed      team-label/wrong-count: assertion 0: got 1 violations, want none; messages ["Pod stray has no team label"]`,
		"    failed      team-label/bad-regex: assertion 0: message \"team (\": error parsing regexp: missing closing ): `team (`",
		"    failed      team-label/no-object-file: open " + filepath.Join(samples, "missing.yaml") + ": no such file or directory",
		"    failed      team-label/no-assertions: the case has no assertions",
		"    failed      prod-namespaces/namespace-unknown: constraint K8sRequiredTeam/prod-pods-have-a-team: its namespaceSelector must judge namespace shop, which is unknown",
		"    failed      valid-constraint-said-invalid: want the constraint refused by the template's schema, got <nil>",
		"    failed      template-does-not-compile/any: template ../suites/requiredteam/constraint.yaml: spec.crd.spec.names.kind is required",
		"1 suites: 1 cases passed, 8 failed, 0 unsupported, 0 skipped",
		"",
	}, "\n"), stdout)
}

func TestPolicyVerifyVerbose(t *testing.T) {
	suite := filepath.Join(gatekeeperSuites, "suites", "imageprefix", "suite.yaml")
	stdout, _, err := runCLI(t, "", "policy", "verify", "-v", suite)
	require.NoError(t, err)
	assert.Equal(t, strings.Join([]string{
		"ok    " + suite + "  passed 2, failed 0, unsupported 0, skipped 0",
		"    passed      registry-prefixes/allowed-images",
		"    passed      registry-prefixes/images-outside",
		"1 suites: 2 cases passed, 0 failed, 0 unsupported, 0 skipped",
		"",
	}, "\n"), stdout)
}

func TestPolicyVerifyUsage(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{name: "no suite", args: []string{"policy", "verify"}, want: "missing argument SUITE"},
		{name: "an unknown flag", args: []string{"policy", "verify", "--fast", filepath.Join(gatekeeperSuites, "suites")}, want: "--fast"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stdout, _, err := runCLI(t, "", tt.args...)
			require.ErrorIs(t, err, ErrUsage)
			assert.Equal(t, ExitUsage, ExitCode(err))
			assert.ErrorContains(t, err, tt.want)
			assert.NotContains(t, stdout, "suites:", "nothing ran")
		})
	}
}

// A SUITE that does not exist is a suite that cannot be read: exit 1, as the help
// says, not 2, which is for a wrong command line. Nothing runs.
func TestPolicyVerifyMissingSuite(t *testing.T) {
	absent := filepath.Join(gatekeeperSuites, "absent")
	stdout, _, err := runCLI(t, "", "policy", "verify", filepath.Join(gatekeeperSuites, "suites"), absent)
	require.ErrorIs(t, err, ErrSuitesFailed)
	assert.NotErrorIs(t, err, ErrUsage)
	assert.Equal(t, ExitFailure, ExitCode(err))
	assert.EqualError(t, err, "suites failed: SUITE "+absent+" cannot be read: no such file or directory")
	assert.NotContains(t, stdout, "suites:", "nothing ran")

	err = RunPolicyVerify(context.Background(), &bytes.Buffer{}, &PolicyVerifyOptions{Paths: []string{absent}})
	require.ErrorIs(t, err, ErrSuitesFailed)
	assert.Equal(t, ExitFailure, ExitCode(err))
}

func TestPolicyVerifyNotSuites(t *testing.T) {
	// A file named on the command line is run as a suite, and one that is not fails.
	notes := filepath.Join(gatekeeperSuites, "suites", "notes.yaml")
	var out bytes.Buffer
	err := RunPolicyVerify(context.Background(), &out, &PolicyVerifyOptions{Paths: []string{notes}})
	require.ErrorIs(t, err, ErrSuitesFailed)
	assert.Equal(t, "ERROR "+notes+`: not a Suite of test.gatekeeper.sh (apiVersion "v1", kind "ConfigMap")`+"\n"+
		"1 suites: 0 cases passed, 0 failed, 0 unsupported, 0 skipped; 1 suites could not be read\n", out.String())

	// A directory without suites is a failure, not a pass.
	out.Reset()
	samples := filepath.Join(gatekeeperSuites, "suites", "requiredteam", "samples")
	err = RunPolicyVerify(context.Background(), &out, &PolicyVerifyOptions{Paths: []string{samples}})
	require.ErrorIs(t, err, ErrSuitesFailed)
	assert.ErrorContains(t, err, "no Suite file")
	assert.Empty(t, out.String())

	// YAML files of other kinds and other files are passed over; a .yml suite is found.
	dir := t.TempDir()
	suite, err := os.ReadFile(filepath.Join(gatekeeperSuites, "suites", "skipped", "suite.yaml"))
	require.NoError(t, err)
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "a", "b"), 0o755))
	for name, content := range map[string]string{
		"a/b/suite.yml":  string(suite),
		"a/suite.json":   string(suite),
		"a/broken.yaml":  "kind: [unclosed",
		"a/other.yaml":   "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n",
		"a/b/notes.txt":  "kind: Suite\napiVersion: test.gatekeeper.sh/v1alpha1\n",
		"a/b/empty.yaml": "",
	} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644))
	}
	out.Reset()
	err = RunPolicyVerify(context.Background(), &out, &PolicyVerifyOptions{Paths: []string{dir}})
	require.NoError(t, err)
	assert.True(t, strings.HasSuffix(out.String(), "\n1 suites: 0 cases passed, 0 failed, 0 unsupported, 2 skipped\n"), out.String())
	assert.Contains(t, out.String(), filepath.Join(dir, "a", "b", "suite.yml"))
}

// A suite named twice, directly and through its directory, runs once.
func TestPolicyVerifyDeduplicates(t *testing.T) {
	dir := filepath.Join(gatekeeperSuites, "suites")
	var out bytes.Buffer
	err := RunPolicyVerify(context.Background(), &out, &PolicyVerifyOptions{Paths: []string{
		filepath.Join(dir, "uniqueslot", "suite.yaml"), dir, filepath.Join(dir, "uniqueslot"),
	}})
	require.NoError(t, err)
	assert.Contains(t, out.String(), "\n5 suites: 16 cases passed, 0 failed, 2 unsupported, 3 skipped\n")
}
