package app

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"

	"github.com/compositor-dev/compositor/api/vocab"
	"github.com/compositor-dev/compositor/generators/crd"
	"github.com/compositor-dev/compositor/policies"
	"github.com/compositor-dev/compositor/test/samplecharts"
)

// composition returns a FireworksApp of chartVersion named name whose spec is the
// YAML values, as a YAML document.
func composition(t *testing.T, chartVersion, name string, values []byte) string {
	t.Helper()
	version, err := crd.VersionName(chartVersion)
	require.NoError(t, err)
	spec := map[string]any{}
	require.NoError(t, yaml.Unmarshal(values, &spec))
	if spec == nil {
		spec = map[string]any{}
	}
	b, err := yaml.Marshal(map[string]any{
		"apiVersion": vocab.CompositionGroup + "/" + version,
		"kind":       "FireworksApp",
		"metadata":   map[string]any{"name": name},
		"spec":       spec,
	})
	require.NoError(t, err)
	return string(b)
}

func writeFile(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "objects.yaml")
	require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
	return p
}

// exampleDenials are the lines the webhook denies each invalid example with.
var exampleDenials = map[string]string{
	"1.1.5/invalid-cache-memory.yaml": "spec.cache.maxMemory: must match pattern ^[0-9]+(Mi|Gi)$ (values.schema.json of subchart cache)",
	"1.1.5/invalid-port.yaml":         "spec.service.port: must be >= 1 (values.schema.json)",
	"1.1.5/invalid-pull-policy.yaml":  "spec.image.pullPolicy: must be one of Always, IfNotPresent, Never (values.schema.json)",
	"1.1.5/invalid-replicas.yaml":     "spec.replicaCount: must be <= 10 (values.schema.json)",
	"1.1.5/invalid-service-type.yaml": "spec.service.type: must be one of ClusterIP, NodePort, LoadBalancer (values.schema.json)",
	"1.1.5/invalid-storage.yaml":      "spec.storage.size: must match pattern ^[0-9]+Gi$ (values.schema.json)",
	"2.0.0/invalid-exposure.yaml":     "spec.exposure: must be one of internal, public (values.schema.json)",
	"2.0.0/invalid-replicas.yaml":     "spec.replicaCount: must be <= 20 (values.schema.json)",
	"2.0.0/invalid-storage.yaml":      "spec.storage.size: is required (values.schema.json)",
}

// exampleWarnings are the warnings of the valid examples that write keys the chart
// neither declares nor reads (issue 49).
var exampleWarnings = map[string]string{
	"1.1.5/values-extra-keys.yaml": "Warning: spec.image.digest: FireworksApp v1-1-5 has no such value\n" +
		"Warning: spec.podAnnotations: FireworksApp v1-1-5 has no such value\n" +
		"Warning: spec.service.annotations: FireworksApp v1-1-5 has no such value\n",
	"2.0.0/values-extra-keys.yaml": "Warning: spec.podAnnotations: FireworksApp v2-0-0 has no such value\n" +
		"Warning: spec.service.type: FireworksApp v2-0-0 has no such value\n",
}

// TestValidateExamples validates every example values file of every sample chart
// version, from the chart directory and, for 1.1.6 (which has none), from a Helm
// repository: valid files pass, invalid ones are denied with the webhook's lines.
func TestValidateExamples(t *testing.T) {
	repo := sampleRepo(t)
	cache := t.TempDir()
	for _, v := range samplecharts.Versions() {
		examples, err := samplecharts.Examples(v)
		require.NoError(t, err)
		require.NotEmpty(t, examples)
		source := []string{"--chart", repo.URL, "--repo", samplecharts.ChartName, "--version", v, "--chart-cache-dir", cache}
		if v != "1.1.6" {
			source = []string{"--chart", sampleDir(t, v)}
		}
		for _, ex := range examples {
			t.Run(v+"/"+ex.Name, func(t *testing.T) {
				file := writeFile(t, composition(t, v, "demo", ex.Values))
				stdout, stderr, err := runCLI(t, "", append([]string{"validate", "-f", file}, source...)...)
				key := v + "/" + ex.Name
				if v == "1.1.6" {
					key = "1.1.5/" + ex.Name // the same chart
				}
				if ex.Valid {
					require.NoError(t, err, stderr)
					assert.Equal(t, "FireworksApp/demo is valid\n", stdout)
					assert.Equal(t, strings.ReplaceAll(exampleWarnings[key], "v1-1-5", "v"+strings.ReplaceAll(v, ".", "-")), stderr)
					return
				}
				require.ErrorIs(t, err, ErrDenied)
				assert.Equal(t, ExitFailure, ExitCode(err))
				assert.Empty(t, stdout)
				want, ok := exampleDenials[key]
				require.True(t, ok, "no expected denial for %s", key)
				assert.Equal(t, "FireworksApp/demo is denied (Invalid):\n"+want+"\nError: 1 of 1 objects denied\n", stderr)
			})
		}
	}
}

// TestValidateSameDecisionAsTheJudge: the lines printed are the Judge's, for the
// request the webhook would build.
func TestValidateSameDecisionAsTheJudge(t *testing.T) {
	values := []byte("replicaCount: 11\nstorage: {size: 10GB}\ncache: {enabled: true, maxMemory: lots}\n")
	doc := composition(t, "1.1.5", "demo", values)
	_, stderr, err := runCLI(t, "", "validate", "-f", writeFile(t, doc), "--chart", sampleDir(t, "1.1.5"))
	require.ErrorIs(t, err, ErrDenied)

	ch, err := samplecharts.Load("1.1.5")
	require.NoError(t, err)
	obj := map[string]any{}
	require.NoError(t, yaml.Unmarshal([]byte(doc), &obj))
	req := policies.NewRequest(policies.Write{Operation: "CREATE", Object: obj, Namespace: "default",
		Resource: metav1.GroupVersionResource{Resource: "fireworksapps"}, Chart: ch})
	engine, err := policies.NewEngine(context.Background(), policies.Options{})
	require.NoError(t, err)
	d, err := policies.NewJudge(policies.JudgeOptions{Engine: engine}).Decide(context.Background(), req)
	require.NoError(t, err)
	require.Len(t, d.Violations, 3, "one in the oneOf, one in the subchart, one maximum")
	assert.Equal(t, "FireworksApp/demo is denied (Invalid):\n"+d.Message()+"\nError: 1 of 1 objects denied\n", stderr)
}

const minReplicasPolicy = `# METADATA
# title: Two replicas at least
# custom:
#   match:
#     kinds:
#       - group: composition.krateo.io
#         kind: FireworksApp
package min_replicas

deny contains {"msg": "at least 2 replicas", "path": "spec.replicaCount"} if {
	object.get(input.review.object.spec, "replicaCount", 1) < 2
}
`

const pinnedTagPolicy = `# METADATA
# custom:
#   match:
#     kinds:
#       - kind: FireworksApp
#   enforcementAction: warn
package pinned_tag

warn contains {"msg": "pin an image tag", "path": "spec.image.tag"} if {
	not input.review.object.spec.image.tag
}
`

const noLoadBalancerPolicy = `# METADATA
# custom:
#   match:
#     kinds:
#       - kind: FireworksApp
#   target: rendered
package no_load_balancer

deny contains {"msg": "no LoadBalancer Services", "path": "spec.type"} if {
	some obj in input.rendered
	obj.kind == "Service"
	obj.spec.type == "LoadBalancer"
}
`

// releaseLabelPolicy shows what the mutating webhook sets, visible to policies as in
// the cluster. Its match and parameters are in the sidecar releaseLabelSidecar.
const releaseLabelPolicy = `package release_label

deny contains sprintf("release %s, paused %s, version %s, namespace %s", [
	input.review.object.metadata.annotations["krateo.io/release-name"],
	input.review.object.metadata.annotations["krateo.io/paused"],
	input.review.object.metadata.labels["krateo.io/composition-version"],
	input.review.namespace,
]) if input.parameters.show
`

const releaseLabelSidecar = "parameters:\n  show: true\nmatch:\n  kinds:\n    - kind: FireworksApp\n"

func TestValidatePolicyDir(t *testing.T) {
	dir := policyTestDir(t, map[string]string{
		"min-replicas.rego":     minReplicasPolicy,
		"pinned-tag.rego":       pinnedTagPolicy,
		"no-load-balancer.rego": noLoadBalancerPolicy,
		"min-replicas_test.rego": `package min_replicas_test

test_nothing if true
`,
	})
	docs := strings.Join([]string{
		composition(t, "1.1.5", "one", []byte("replicaCount: 1\nimage: {tag: '1.27'}\n")),
		composition(t, "1.1.5", "untagged", []byte("replicaCount: 3\n")),
		composition(t, "1.1.5", "public", []byte("replicaCount: 3\nimage: {tag: '1.27'}\nservice: {type: LoadBalancer}\n")),
		composition(t, "1.1.5", "fine", []byte("replicaCount: 2\nimage: {tag: '1.27'}\n")),
	}, "---\n")
	stdout, stderr, err := runCLI(t, "", "validate", "-f", writeFile(t, docs), "--chart", sampleDir(t, "1.1.5"), "--policy-dir", dir)
	require.ErrorIs(t, err, ErrDenied)
	assert.Equal(t, "FireworksApp/untagged is valid\nFireworksApp/fine is valid\n", stdout)
	assert.Equal(t, strings.Join([]string{
		"FireworksApp/one is denied (Forbidden):",
		"spec.replicaCount: at least 2 replicas [policy min-replicas]",
		"Warning: [policy pinned-tag] spec.image.tag: pin an image tag",
		"FireworksApp/public is denied (Forbidden):",
		"Service/public-fireworks-app spec.type: no LoadBalancer Services [policy no-load-balancer]",
		"Error: 2 of 4 objects denied",
		"",
	}, "\n"), stderr)
}

func TestValidateSeesMutatingDefaults(t *testing.T) {
	dir := policyTestDir(t, map[string]string{"release-label.rego": releaseLabelPolicy, "release-label.yaml": releaseLabelSidecar})
	doc := composition(t, "1.1.5", "demo", []byte("{}"))
	_, stderr, err := runCLI(t, doc, "validate", "-f", "-", "--chart", sampleDir(t, "1.1.5"), "--policy-dir", dir, "-n", "team-a")
	require.ErrorIs(t, err, ErrDenied)
	assert.Contains(t, stderr, "release demo, paused false, version v1-1-5, namespace team-a [policy release-label]\n")
}

func definitionDoc(name, url, version string, insecure bool) string {
	return fmt.Sprintf(`apiVersion: core.krateo.io/v1alpha1
kind: CompositionDefinition
metadata:
  name: %s
  namespace: apps
  annotations:
    krateo.io/release-name: shared-release
spec:
  chart:
    url: %s
    repo: fireworks-app
    version: %q
    insecureSkipVerifyTLS: %t
`, name, url, version, insecure)
}

func TestValidateDefinitions(t *testing.T) {
	docs := definitionDoc("bad", "http://charts.example.com", "^1.1", true) + "---\n" +
		definitionDoc("good", "https://charts.example.com", "1.1.5", false)
	file := writeFile(t, docs)
	stdout, stderr, err := runCLI(t, "", "validate", "-f", file)
	require.ErrorIs(t, err, ErrDenied, "definitions need no chart: built-ins and policies only")
	assert.Equal(t, "CompositionDefinition/good is valid\n", stdout)
	assert.Equal(t, strings.Join([]string{
		"CompositionDefinition/bad is denied (Forbidden):",
		`spec.chart.url: chart URL "http://charts.example.com" must use oci://, https:// or imported://; plain http:// is allowed only to a loopback address [policy chart-url-scheme]`,
		`spec.chart.version: chart version "^1.1" must be an exact version such as 1.2.3, not a range [policy exact-chart-version]`,
		"spec.chart.insecureSkipVerifyTLS: skipping TLS verification of the chart server is not allowed; give the server a certificate the cluster trusts [policy no-insecure-tls]",
		"Error: 1 of 2 objects denied",
		"",
	}, "\n"), stderr)

	_, stderr, err = runCLI(t, "", "validate", "-f", file,
		"--disable-builtin-policy", "chart-url-scheme,exact-chart-version", "--disable-builtin-policy", "no-insecure-tls")
	require.NoError(t, err, stderr)
	// The old spelling still works (deprecated).
	_, stderr, err = runCLI(t, "", "validate", "-f", file,
		"--disable-builtin", "chart-url-scheme,exact-chart-version", "--disable-builtin", "no-insecure-tls")
	require.NoError(t, err, stderr)

	_, _, err = runCLI(t, "", "validate", "-f", file, "--disable-builtin-policy", "no-such-policy")
	require.ErrorIs(t, err, policies.ErrUnknownBuiltin)
	assert.Equal(t, ExitUsage, ExitCode(err))
}

// TestValidateWithDefinitionFile takes the chart from a definition's spec.chart, served
// by a real Helm repository.
func TestValidateWithDefinitionFile(t *testing.T) {
	repo := sampleRepo(t)
	def := writeFile(t, definitionDoc("fireworks", repo.URL, "1.1.6", false))
	dir := policyTestDir(t, map[string]string{
		"release-label.rego": releaseLabelPolicy,
		"release-label.yaml": releaseLabelSidecar,
		"definition.rego": `package definition

deny contains sprintf("definition %s %s", [input.definition.url, input.definition.version]) if true
`,
		"definition.yaml": "match:\n  kinds:\n    - kind: FireworksApp\n",
	})
	docs := composition(t, "1.1.6", "demo", []byte("replicaCount: 11\n")) + "---\n" +
		composition(t, "1.1.5", "old", []byte("{}"))
	_, stderr, err := runCLI(t, "", "validate", "-f", writeFile(t, docs), "--definition", def, "--policy-dir", dir, "--chart-cache-dir", t.TempDir())
	require.ErrorIs(t, err, ErrDenied)
	require.ErrorIs(t, err, ErrNotChecked)
	assert.Equal(t, strings.Join([]string{
		"FireworksApp/demo is denied (Invalid):",
		"spec.replicaCount: must be <= 10 (values.schema.json)",
		"definition " + repo.URL + " 1.1.6 [policy definition]",
		"release shared-release, paused false, version v1-1-6, namespace default [policy release-label]",
		"FireworksApp/old cannot be checked: chart fireworks-app 1.1.6 serves composition.krateo.io/v1-1-6, kind FireworksApp, not composition.krateo.io/v1-1-5, kind FireworksApp",
		"Error: 1 of 2 objects denied, 1 could not be checked",
		"",
	}, "\n"), stderr)
}

func TestValidateNotChecked(t *testing.T) {
	docs := composition(t, "1.1.5", "demo", []byte("{}")) + "---\napiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n"
	stdout, stderr, err := runCLI(t, "", "validate", "-f", writeFile(t, docs))
	require.ErrorIs(t, err, ErrNotChecked)
	require.NotErrorIs(t, err, ErrDenied)
	assert.Equal(t, ExitFailure, ExitCode(err))
	assert.Empty(t, stdout)
	assert.Equal(t, strings.Join([]string{
		"FireworksApp/demo cannot be checked: a composition needs its chart: give --chart or --definition",
		"Deployment/web cannot be checked: apps/v1 Deployment is neither a composition (composition.krateo.io) nor a CompositionDefinition (core.krateo.io): the validating webhook does not admit it",
		"Error: 2 of 2 objects could not be checked",
		"",
	}, "\n"), stderr)
}

func TestValidateBrokenPolicyDir(t *testing.T) {
	dir := policyTestDir(t, map[string]string{"broken.rego": "package broken\n\ndeny contains msg if {\n\tmsg := unknown_function(1)\n}\n"})
	doc := composition(t, "1.1.5", "demo", []byte("{}"))
	_, _, err := runCLI(t, "", "validate", "-f", writeFile(t, doc), "--chart", sampleDir(t, "1.1.5"), "--policy-dir", dir)
	require.ErrorIs(t, err, policies.ErrCompile, "no policy silently left out")
	assert.Contains(t, err.Error(), "broken.rego:4")
}

func TestValidateUsage(t *testing.T) {
	file := writeFile(t, composition(t, "1.1.5", "demo", []byte("{}")))
	for name, args := range map[string][]string{
		"no file":                 {"validate", "--chart", sampleDir(t, "1.1.5")},
		"chart and definition":    {"validate", "-f", file, "--chart", sampleDir(t, "1.1.5"), "--definition", file},
		"unknown flag":            {"validate", "-f", file, "--charts", "x"},
		"arguments":               {"validate", "-f", file, "extra"},
		"version with local":      {"validate", "-f", file, "--chart", sampleDir(t, "1.1.5"), "--version", "1.1.5"},
		"definition not one":      {"validate", "-f", file, "--definition", file},
		"bad timeout":             {"validate", "-f", file, "--policy-timeout", "0s"},
		"namespace labels syntax": {"validate", "-f", file, "--namespace-labels", "novalue"},
	} {
		t.Run(name, func(t *testing.T) {
			_, _, err := runCLI(t, "", args...)
			require.ErrorIs(t, err, ErrUsage)
			assert.Equal(t, ExitUsage, ExitCode(err))
		})
	}

	_, _, err := runCLI(t, "", "validate", "-f", writeFile(t, "# nothing\n---\n"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "holds no object")
}

func TestReadObjectsKeepsIntegersAndExpandsLists(t *testing.T) {
	list := `{"apiVersion": "v1", "kind": "List", "items": [
  {"apiVersion": "composition.krateo.io/v1-1-5", "kind": "FireworksApp", "metadata": {"name": "a"}, "spec": {"replicaCount": 3}},
  {"apiVersion": "composition.krateo.io/v1-1-5", "kind": "FireworksApp", "metadata": {"name": "b"}, "spec": {"ratio": 0.5}}
]}`
	objs, err := readObjects("-", strings.NewReader(list+"\n---\n"+composition(t, "1.1.5", "c", []byte("replicaCount: 2\n"))))
	require.NoError(t, err)
	require.Len(t, objs, 3)
	assert.Equal(t, []string{"a", "b", "c"}, []string{objs[0].GetName(), objs[1].GetName(), objs[2].GetName()})
	n, _, _ := unstructured.NestedFieldNoCopy(objs[0].Object, "spec", "replicaCount")
	assert.Equal(t, int64(3), n, "integers decode as the API server's JSON decoder does")
	r, _, _ := unstructured.NestedFieldNoCopy(objs[1].Object, "spec", "ratio")
	assert.Equal(t, 0.5, r)
	assert.Equal(t, schema.GroupVersionKind{Group: vocab.CompositionGroup, Version: "v1-1-5", Kind: "FireworksApp"}, objs[2].GroupVersionKind())

	_, err = readObjects("-", strings.NewReader("a: [\n"))
	require.Error(t, err)
}

// gkMaxReplicas is a ConstraintTemplate written for these tests, with its Constraint in
// another file of the directory: Deployments may have at most spec.parameters.max
// replicas.
const gkMaxReplicas = `apiVersion: templates.gatekeeper.sh/v1
kind: ConstraintTemplate
metadata:
  name: testmaxreplicas
spec:
  crd:
    spec:
      names:
        kind: TestMaxReplicas
      validation:
        openAPIV3Schema:
          type: object
          properties:
            max: {type: integer}
  targets:
    - target: admission.k8s.gatekeeper.sh
      rego: |
        package testmaxreplicas

        violation[{"msg": msg}] {
          input.review.object.spec.replicas > input.parameters.max
          msg := sprintf("%v replicas is more than %v", [input.review.object.spec.replicas, input.parameters.max])
        }
`

const gkMaxReplicasConstraint = `apiVersion: constraints.gatekeeper.sh/v1beta1
kind: TestMaxReplicas
metadata:
  name: at-most-three
spec:
  match:
    kinds: [{apiGroups: [apps], kinds: [Deployment]}]
  parameters: {max: 3}
`

// TestValidatePolicyDirGatekeeper: --policy-dir reads ConstraintTemplates and
// Constraints from its YAML files and judges what each composition renders, as the
// webhook does; a constraint without its template, or with parameters its template's
// schema refuses, makes the directory an error rather than a policy silently left out.
func TestValidatePolicyDirGatekeeper(t *testing.T) {
	dir := policyTestDir(t, map[string]string{
		"templates.yaml":   gkMaxReplicas,
		"constraints.yaml": gkMaxReplicasConstraint,
		"notes.yaml":       "title: not a policy\n",
	})
	docs := strings.Join([]string{
		composition(t, "1.1.5", "small", []byte("replicaCount: 3\n")),
		composition(t, "1.1.5", "big", []byte("replicaCount: 5\n")),
	}, "---\n")
	stdout, stderr, err := runCLI(t, "", "validate", "-f", writeFile(t, docs), "--chart", sampleDir(t, "1.1.5"), "--policy-dir", dir)
	require.ErrorIs(t, err, ErrDenied)
	assert.Equal(t, "FireworksApp/small is valid\n", stdout)
	assert.Equal(t, strings.Join([]string{
		"FireworksApp/big is denied (Forbidden):",
		"Deployment/big-fireworks-app: 5 replicas is more than 3 [constraint TestMaxReplicas/at-most-three]",
		"Error: 1 of 2 objects denied",
		"",
	}, "\n"), stderr)

	for name, files := range map[string]map[string]string{
		"no template": {"constraints.yaml": gkMaxReplicasConstraint},
		"bad parameters": {"templates.yaml": gkMaxReplicas,
			"constraints.yaml": strings.Replace(gkMaxReplicasConstraint, "{max: 3}", "{max: three}", 1)},
	} {
		t.Run(name, func(t *testing.T) {
			_, _, err := runCLI(t, "", "validate", "-f", writeFile(t, docs), "--chart", sampleDir(t, "1.1.5"), "--policy-dir", policyTestDir(t, files))
			require.Error(t, err)
			assert.Contains(t, err.Error(), "constraints.yaml")
			assert.NotErrorIs(t, err, ErrDenied)
		})
	}
}
