package app

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/compositor-dev/compositor/plan"
	"github.com/compositor-dev/compositor/test/samplecharts"
)

// planCompositions are three 1.1.5 FireworksApps: a LoadBalancer (public in 2.0.0), a
// ClusterIP, and one whose exposure 2.0.0's schema refuses (1.1.5 declares none).
const planCompositions = `apiVersion: composition.krateo.io/v1-1-5
kind: FireworksApp
metadata: {name: web, namespace: team-a}
spec:
  service: {type: LoadBalancer, port: 8080}
---
apiVersion: composition.krateo.io/v1-1-5
kind: FireworksApp
metadata: {name: internal, namespace: team-a}
spec:
  service: {type: ClusterIP}
---
apiVersion: composition.krateo.io/v1-1-5
kind: FireworksApp
metadata: {name: bad, namespace: team-a}
spec:
  exposure: external
  service: {port: 80}
`

func runPlan(t *testing.T, stdin string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	return runCLI(t, stdin, append([]string{"plan", "--from", sampleDir(t, "1.1.5"), "--to", sampleDir(t, "2.0.0")}, args...)...)
}

func TestPlanText(t *testing.T) {
	stdout, _, err := runPlan(t, planCompositions, "-f", "-")
	require.NoError(t, err, "refusals are printed, not errors")
	lines := strings.Split(stdout, "\n")
	assert.Equal(t, "fireworks-app 1.1.5 → 2.0.0: 3 compositions to move, 1 refused, 0 objects deleted", lines[0])
	assert.Contains(t, stdout, "RBAC gains: ingresses.networking.k8s.io\n")
	assert.Regexp(t, `(?m)^Plan sha256:[0-9a-f]{64}$`, stdout)
	assert.Contains(t, stdout, "\nteam-a/bad (release bad): refused\n  ! spec.exposure: must be one of internal, public (values.schema.json)\n")
	assert.Contains(t, stdout, "\nteam-a/web (release web): moves\n  values: {\"exposure\":\"public\",\"service\":{\"port\":8080}}\n  + Ingress team-a/web-fireworks-app (networking.k8s.io/v1)\n")
	assert.Contains(t, stdout, "\nteam-a/internal (release internal): moves\n")
	// Blocks come sorted by namespace/name.
	assert.Less(t, strings.Index(stdout, "team-a/bad "), strings.Index(stdout, "team-a/internal "))
	assert.Less(t, strings.Index(stdout, "team-a/internal "), strings.Index(stdout, "team-a/web "))
}

func TestPlanJSON(t *testing.T) {
	file := writeFile(t, planCompositions)
	stdout, _, err := runPlan(t, "", "-f", file, "-o", "json")
	require.NoError(t, err)
	var p plan.Plan
	require.NoError(t, json.Unmarshal([]byte(stdout), &p))
	assert.Equal(t, plan.Summary{ToMove: 3, Refused: 1, Additions: 1, Deletions: 0, Changed: p.Summary.Changed}, p.Summary)
	assert.Equal(t, []string{"ingresses.networking.k8s.io"}, p.RBAC.Gained)
	require.Len(t, p.Compositions, 3)
	assert.Equal(t, "bad", p.Compositions[0].Name)
	assert.NotEmpty(t, p.Compositions[0].Refused)
	assert.Equal(t, "public", p.Compositions[2].Values["exposure"])

	// The hash names the plan: the same input, the same hash; another, another.
	again, _, err := runPlan(t, planCompositions, "-f", "-", "-o", "yaml")
	require.NoError(t, err)
	assert.Contains(t, again, "hash: sha256:"+strings.TrimPrefix(p.Hash, "sha256:"))
	other, _, err := runPlan(t, strings.Replace(planCompositions, "port: 8080", "port: 8081", 1), "-f", "-", "-o", "json")
	require.NoError(t, err)
	var q plan.Plan
	require.NoError(t, json.Unmarshal([]byte(other), &q))
	assert.NotEqual(t, p.Hash, q.Hash)
}

// A List, as `kubectl get -o yaml` prints it, from a Helm repository.
func TestPlanListFromRepository(t *testing.T) {
	repo := sampleRepo(t)
	list := `apiVersion: v1
kind: List
items:
- apiVersion: composition.krateo.io/v1-1-5
  kind: FireworksApp
  metadata: {name: np, namespace: team-b, labels: {krateo.io/composition-version: v1-1-5}, annotations: {krateo.io/release-name: np-release}}
  spec: {service: {type: NodePort}}
`
	stdout, _, err := runCLI(t, list, "plan", "-f", "-", "--from", repo.URL, "--from-version", "1.1.5", "--to", repo.URL, "--to-version", "2.0.0",
		"--repo", samplecharts.ChartName, "--chart-cache-dir", t.TempDir())
	require.NoError(t, err)
	assert.Contains(t, stdout, "fireworks-app 1.1.5 → 2.0.0: 1 composition to move, 0 refused, 0 objects deleted\n")
	assert.Contains(t, stdout, "team-b/np (release np-release): moves\n  values: {\"exposure\":\"public\",\"service\":{}}\n  + Ingress team-b/np-release-fireworks-app (networking.k8s.io/v1)\n")
}

func TestPlanErrors(t *testing.T) {
	for name, tc := range map[string]struct {
		args  []string
		usage bool
		want  string
	}{
		"missing --to":      {[]string{"plan", "--from", sampleDir(t, "1.1.5"), "-f", "-"}, true, "missing --to"},
		"missing -f":        {[]string{"plan", "--from", sampleDir(t, "1.1.5"), "--to", sampleDir(t, "2.0.0")}, true, "missing -f FILE"},
		"bad output":        {[]string{"plan", "--from", sampleDir(t, "1.1.5"), "--to", sampleDir(t, "2.0.0"), "-f", "-", "-o", "xml"}, true, `--output must be text, yaml or json, got "xml"`},
		"version of local":  {[]string{"plan", "--from", sampleDir(t, "1.1.5"), "--to", sampleDir(t, "2.0.0"), "--to-version", "2.0.0", "-f", "-"}, true, "--to-version applies to a chart URL"},
		"two arguments":     {[]string{"plan", "x", "y"}, true, "plan takes at most one argument"},
		"definition and -f": {[]string{"plan", "x", "-f", "-"}, true, "--from, --to and -f are for planning offline"},
		"no cluster":        {[]string{"plan", "x", "--kubeconfig", filepath.Join(t.TempDir(), "none")}, false, "loading kubeconfig"},
		"missing file":      {[]string{"plan", "--from", sampleDir(t, "1.1.5"), "--to", sampleDir(t, "2.0.0"), "-f", filepath.Join(t.TempDir(), "none.yaml")}, false, "none.yaml"},
		"missing chart":     {[]string{"plan", "--from", filepath.Join(t.TempDir(), "nochart"), "--to", sampleDir(t, "2.0.0"), "-f", "-"}, false, "--from: loading chart"},
		"the same version":  {[]string{"plan", "--from", sampleDir(t, "2.0.0"), "--to", sampleDir(t, "2.0.0"), "-f", "-"}, false, "nothing moves"},
		"unknown --disable": {[]string{"plan", "--from", sampleDir(t, "1.1.5"), "--to", sampleDir(t, "2.0.0"), "-f", "-", "--disable-builtin-policy", "nope"}, true, "nope"},
	} {
		t.Run(name, func(t *testing.T) {
			_, _, err := runCLI(t, planCompositions, tc.args...)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			if tc.usage {
				assert.Equal(t, ExitUsage, ExitCode(err))
			} else {
				assert.Equal(t, ExitFailure, ExitCode(err))
			}
		})
	}
}
