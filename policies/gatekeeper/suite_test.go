package gatekeeper_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/compositor-dev/compositor/policies/gatekeeper"
)

// outcome is a case's result with its reason cut to what the test asserts: a part of it.
type outcome struct {
	test, name string
	outcome    gatekeeper.Outcome
	reason     string // a substring of the reason; "" when there must be none
}

func TestVerify(t *testing.T) {
	const expansionReason = "expansion: ExpansionTemplates are not read"
	tests := []struct {
		suite string
		want  []outcome
	}{
		{
			suite: "testdata/suites/requiredteam/suite.yaml",
			want: []outcome{
				{"team-label", "team-present", gatekeeper.Passed, ""},
				{"team-label", "team-missing", gatekeeper.Passed, ""},
				{"team-label", "kube-namespaces-excluded", gatekeeper.Passed, ""},
				{"team-label", "delete-reviews-the-old-object", gatekeeper.Passed, ""},
				{"team-label", "not-yet", gatekeeper.Skipped, "skip: true"},
				{"known-teams", "known-team", gatekeeper.Passed, ""},
				{"known-teams", "unknown-team", gatekeeper.Passed, ""},
				{"known-teams", "update-moves-team", gatekeeper.Passed, ""},
				{"prod-namespaces", "prod-pod", gatekeeper.Passed, ""},
				{"prod-namespaces", "lab-pod", gatekeeper.Passed, ""},
				{"teams-must-be-a-list", "", gatekeeper.Passed, ""},
				{"expanded-workloads", "deployment-pod", gatekeeper.Unsupported, expansionReason},
			},
		},
		{
			suite: "testdata/suites/imageprefix/suite.yaml",
			want: []outcome{
				{"registry-prefixes", "allowed-images", gatekeeper.Passed, ""},
				{"registry-prefixes", "images-outside", gatekeeper.Passed, ""},
			},
		},
		{
			suite: "testdata/suites/uniqueslot/suite.yaml",
			want: []outcome{
				{"unique-slot", "alone", gatekeeper.Passed, ""},
				{"unique-slot", "taken", gatekeeper.Passed, ""},
				{"unique-slot", "taken-in-another-namespace", gatekeeper.Passed, ""},
				{"unique-slot", "itself-in-the-inventory", gatekeeper.Passed, ""},
			},
		},
		{
			suite: "testdata/suites/celonly/suite.yaml",
			want: []outcome{
				{"tier-label", "no-tier", gatekeeper.Unsupported, "K8sNativeValidation"},
			},
		},
		{
			suite: "testdata/suites/skipped/suite.yaml",
			want: []outcome{
				{"team-label", "team-present", gatekeeper.Skipped, "skip: true"},
				{"team-label", "team-missing", gatekeeper.Skipped, "skip: true"},
			},
		},
		{
			suite: "testdata/failing/suite.yaml",
			want: []outcome{
				{"team-label", "passes", gatekeeper.Passed, ""},
				{"team-label", "wrong-expectation", gatekeeper.Failed, "assertion 0: got no violations, want at least one"},
				{"team-label", "wrong-count", gatekeeper.Failed, `assertion 0: got 1 violations, want none; messages ["Pod stray has no team label"]`},
				{"team-label", "bad-regex", gatekeeper.Failed, `assertion 0: message "team ("`},
				{"team-label", "no-object-file", gatekeeper.Failed, "missing.yaml"},
				{"team-label", "no-assertions", gatekeeper.Failed, "the case has no assertions"},
				{"prod-namespaces", "namespace-unknown", gatekeeper.Failed, "namespace shop, which is unknown"},
				{"valid-constraint-said-invalid", "", gatekeeper.Failed, "want the constraint refused by the template's schema, got <nil>"},
				{"template-does-not-compile", "any", gatekeeper.Failed, "spec.crd.spec.names.kind is required"},
			},
		},
	}
	for _, tt := range tests {
		t.Run(filepath.Base(filepath.Dir(tt.suite)), func(t *testing.T) {
			res := gatekeeper.Verify(context.Background(), tt.suite, serverOptions())
			require.NoError(t, res.Err)
			assert.Equal(t, tt.suite, res.Path)
			var got []outcome
			for _, c := range res.Cases {
				got = append(got, outcome{c.Test, c.Case, c.Outcome, c.Reason})
			}
			require.Len(t, got, len(tt.want), "%+v", got)
			counts := map[gatekeeper.Outcome]int{}
			for i, w := range tt.want {
				g := got[i]
				assert.Equal(t, [3]string{w.test, w.name, string(w.outcome)}, [3]string{g.test, g.name, string(g.outcome)}, "case %d: %s", i, g.reason)
				if w.reason == "" {
					assert.Empty(t, g.reason, "%s/%s", g.test, g.name)
				} else {
					assert.Contains(t, g.reason, w.reason, "%s/%s", g.test, g.name)
				}
				counts[w.outcome]++
			}
			for _, o := range []gatekeeper.Outcome{gatekeeper.Passed, gatekeeper.Failed, gatekeeper.Unsupported, gatekeeper.Skipped} {
				assert.Equal(t, counts[o], res.Count(o), "%s", o)
			}
		})
	}
}

// A suite reads "violations: yes" as YAML 1.2 does, the string yes, not true; and a
// count as a number.
func TestVerifyAssertionForms(t *testing.T) {
	tests := []struct {
		name       string
		assertions string
		want       gatekeeper.Outcome
		reason     string
	}{
		{name: "yes", assertions: "- violations: yes", want: gatekeeper.Passed},
		{name: "unset is yes", assertions: "- message: team", want: gatekeeper.Passed},
		{name: "no", assertions: "- violations: no", want: gatekeeper.Failed, reason: "want none"},
		{name: "a count", assertions: "- violations: 1", want: gatekeeper.Passed},
		{name: "a wrong count", assertions: "- violations: 3", want: gatekeeper.Failed, reason: "got 1 violations, want exactly 3"},
		{name: "zero matching a message", assertions: "- {violations: 0, message: '^team'}", want: gatekeeper.Passed},
		{name: "a quoted yes", assertions: `- violations: "yes"`, want: gatekeeper.Passed},
		{name: "a count as a string", assertions: `- violations: "1"`, want: gatekeeper.Failed, reason: `violations "1" must be yes, no or a count`},
		{name: "a negative count", assertions: "- violations: -1", want: gatekeeper.Failed, reason: "must be yes, no or a count"},
		{name: "YAML 1.1's on is a string", assertions: "- violations: on", want: gatekeeper.Failed, reason: `violations "on" must be yes, no or a count`},
		{name: "a message matched anywhere", assertions: "- {violations: 1, message: no team}", want: gatekeeper.Passed},
		{name: "a message not matching", assertions: "- {violations: yes, message: '^no team'}", want: gatekeeper.Failed, reason: `got no violations matching "^no team"`},
	}
	dir := t.TempDir()
	for _, f := range []string{"template.yaml", "constraint.yaml", "samples/pod-no-team.yaml"} {
		data, err := os.ReadFile(filepath.Join("testdata/suites/requiredteam", f))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, filepath.Base(f)), data, 0o644))
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			suite := filepath.Join(dir, "suite.yaml")
			require.NoError(t, os.WriteFile(suite, []byte(`apiVersion: test.gatekeeper.sh/v1alpha1
kind: Suite
tests:
- name: t
  template: template.yaml
  constraint: constraint.yaml
  cases:
  - name: c
    object: pod-no-team.yaml
    assertions:
    `+tt.assertions+"\n"), 0o644))
			res := gatekeeper.Verify(context.Background(), suite, serverOptions())
			require.NoError(t, res.Err)
			require.Len(t, res.Cases, 1)
			assert.Equal(t, tt.want, res.Cases[0].Outcome, res.Cases[0].Reason)
			assert.Contains(t, res.Cases[0].Reason, tt.reason)
		})
	}
}

func TestVerifyUnreadableSuites(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
		return p
	}
	tests := []struct {
		name, path, errText string
	}{
		{name: "no file", path: filepath.Join(dir, "absent.yaml"), errText: "absent.yaml"},
		{name: "not YAML", path: write("broken.yaml", "tests: [unclosed"), errText: "reading the suite"},
		{name: "not a Suite", path: "testdata/suites/notes.yaml", errText: "not a Suite"},
		{name: "a Suite of another group", path: write("other.yaml", "apiVersion: example.com/v1\nkind: Suite\n"), errText: "not a Suite"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := gatekeeper.Verify(context.Background(), tt.path, serverOptions())
			require.Error(t, res.Err)
			assert.ErrorContains(t, res.Err, tt.errText)
			assert.Empty(t, res.Cases)
		})
	}
}

func TestIsSuite(t *testing.T) {
	for _, path := range []string{"testdata/suites/requiredteam/suite.yaml", "testdata/failing/suite.yaml"} {
		data, err := os.ReadFile(path)
		require.NoError(t, err)
		assert.True(t, gatekeeper.IsSuite(data), path)
	}
	for _, path := range []string{"testdata/suites/notes.yaml", "testdata/suites/requiredteam/template.yaml", "testdata/suites/README.txt"} {
		data, err := os.ReadFile(path)
		require.NoError(t, err)
		assert.False(t, gatekeeper.IsSuite(data), path)
	}
}

func TestDecodeObjects(t *testing.T) {
	objs, err := gatekeeper.DecodeObjects([]byte("---\napiVersion: v1\nkind: Pod\nmetadata: {name: a}\n---\n# nothing\n---\n{\"apiVersion\": \"v1\", \"kind\": \"Pod\", \"metadata\": {\"name\": \"b\"}}\n"))
	require.NoError(t, err)
	require.Len(t, objs, 2)
	assert.Equal(t, "a", objs[0]["metadata"].(map[string]any)["name"])
	assert.Equal(t, "b", objs[1]["metadata"].(map[string]any)["name"])

	_, err = gatekeeper.DecodeObjects([]byte("kind: [unclosed\n"))
	assert.Error(t, err)
}
