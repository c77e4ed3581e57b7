package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/compositor-dev/compositor/test/controlplane"
)

// readyDefinition applies the local seed definition for the sample repository and waits
// until fireworksapps v1-1-5 is served.
func readyDefinition(t *testing.T, cp *controlplane.ControlPlane) {
	t.Helper()
	readyDefinitionFrom(t, cp, sampleRepository(t).URL)
}

// readyDefinitionFrom is readyDefinition with the chart repository at repoURL.
func readyDefinitionFrom(t *testing.T, cp *controlplane.ControlPlane, repoURL string) {
	t.Helper()
	ctx := context.Background()
	res := cp.Kubectl(ctx, "", "apply", "-f", filepath.Join(seedDir(t), "namespaces.yaml"))
	require.NoError(t, res.Err, res.Stderr)
	res = cp.Kubectl(ctx, localSeed(t, repoURL), "apply", "-f", "-")
	require.NoError(t, res.Err, res.Stderr)
	res = cp.Kubectl(ctx, "", "wait", "compositiondefinition", "fireworksapp-1-1-5", "-n", "fireworksapp-system", "--for", "condition=Ready=True", "--timeout", "120s")
	require.NoError(t, res.Err, res.Stderr)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		res := cp.Kubectl(ctx, "", "get", "fireworksapps.v1-1-5.composition.krateo.io", "-A")
		assert.NoError(c, res.Err, res.Stderr)
	}, time.Minute, 200*time.Millisecond)
}

const noDockerHub = `apiVersion: policy.compositor.dev/v1alpha1
kind: CompositionPolicy
metadata:
  name: no-docker-hub
spec:
  match:
    kinds: [{group: composition.krateo.io, kind: "*"}]
  rego: |
    package compositor.nodockerhub

    deny contains {"msg": sprintf("registry %q is not allowed", [registry]), "path": "spec.image.repository"} if {
      repository := input.review.object.spec.image.repository
      startswith(repository, "docker.io/")
      registry := split(repository, "/")[0]
    }
`

const singleReplicaWarning = `apiVersion: policy.compositor.dev/v1alpha1
kind: CompositionPolicy
metadata:
  name: single-replica
spec:
  enforcementAction: warn
  match:
    kinds: [{group: composition.krateo.io, kind: FireworksApp}]
  rego: |
    package compositor.singlereplica

    warn contains "one replica has no redundancy: set spec.replicaCount to 2 or more" if {
      object.get(input.review.object.spec, "replicaCount", 1) < 2
    }
`

func TestValidationShowsEveryViolationInline(t *testing.T) {
	cp := controlplane.Start(t)
	startCompositor(t, cp)
	readyDefinition(t, cp)
	ctx := context.Background()

	for _, policy := range []string{noDockerHub, singleReplicaWarning} {
		res := cp.Kubectl(ctx, policy, "apply", "-f", "-")
		require.NoError(t, res.Err, res.Stderr)
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		res := cp.Kubectl(ctx, "", "get", "compositionpolicies", "-o", "jsonpath={.items[*].status.compiled}")
		assert.Equal(c, "true true", res.Stdout)
	}, time.Minute, 200*time.Millisecond)

	// The API server checks the generated CRD's schema after the mutating webhooks and
	// before the validating ones. Compositor's mutating webhook validates already, so
	// what the CRD also carries comes in the same denial as the policies, and a warning
	// is printed once.
	t.Run("schema errors the CRD carries and policy denials, in one denial", func(t *testing.T) {
		res := cp.Kubectl(ctx, `apiVersion: composition.krateo.io/v1-1-5
kind: FireworksApp
metadata:
  name: broken
  namespace: fireworksapp-system
spec:
  storage:
    size: 10G
  cache:
    enabled: true
    maxMemory: lots
  image:
    repository: docker.io/nginx
`, "apply", "-f", "-")
		require.Error(t, res.Err)
		assert.Equal(t, `Warning: [policy single-replica] one replica has no redundancy: set spec.replicaCount to 2 or more
The FireworksApp "broken" is invalid: 
* spec.storage.size: must match pattern ^[0-9]+Gi$ (values.schema.json)
* spec.cache.maxMemory: must match pattern ^[0-9]+(Mi|Gi)$ (values.schema.json of subchart cache)
* spec.image.repository: registry "docker.io" is not allowed [policy no-docker-hub]
`, res.Stderr)
	})

	// What only the merged values show (a null deleting a required default) and the
	// policies come from the webhook, in one denial, one per line.
	t.Run("schema and policy violations of the webhook, one per line", func(t *testing.T) {
		res := cp.Kubectl(ctx, `apiVersion: composition.krateo.io/v1-1-5
kind: FireworksApp
metadata:
  name: broken
  namespace: fireworksapp-system
spec:
  replicaCount: 3
  service: null
  image:
    repository: docker.io/nginx
`, "create", "-f", "-")
		require.Error(t, res.Err)
		assert.Equal(t, `The FireworksApp "broken" is invalid: 
* spec.service: is required (values.schema.json)
* spec.image.repository: registry "docker.io" is not allowed [policy no-docker-hub]
`, res.Stderr)
	})

	t.Run("compositor validate says what the webhook says", func(t *testing.T) {
		composition := "apiVersion: composition.krateo.io/v1-1-5\nkind: FireworksApp\nmetadata: {name: same, namespace: fireworksapp-system}\nspec:\n  replicaCount: 3\n  service: null\n  image: {repository: docker.io/nginx}\n"
		dir := t.TempDir()
		file := filepath.Join(dir, "same.yaml")
		require.NoError(t, os.WriteFile(file, []byte(composition), 0o600))
		policyDir := filepath.Join(dir, "policies")
		require.NoError(t, os.Mkdir(policyDir, 0o700))
		policy := &unstructured.Unstructured{}
		require.NoError(t, yaml.Unmarshal([]byte(noDockerHub), &policy.Object))
		rego, _, _ := unstructured.NestedString(policy.Object, "spec", "rego")
		match, _, _ := unstructured.NestedMap(policy.Object, "spec", "match")
		sidecar, err := yaml.Marshal(map[string]any{"match": match})
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(policyDir, "no-docker-hub.rego"), []byte(rego), 0o600))
		require.NoError(t, os.WriteFile(filepath.Join(policyDir, "no-docker-hub.yaml"), sidecar, 0o600))

		cli := exec.Command(buildCompositor(t), "validate", "-f", file, "--policy-dir", policyDir,
			"--chart", filepath.Join(controlplane.RepoRoot(), "samples", "charts", "fireworks-app", "1.1.5"))
		var stderr strings.Builder
		cli.Stderr = &stderr
		require.Error(t, cli.Run(), "validate must exit non-zero on a denial")

		obj := &unstructured.Unstructured{}
		require.NoError(t, yaml.Unmarshal([]byte(composition), &obj.Object))
		err = cp.Client.Create(ctx, obj)
		var status apierrors.APIStatus
		require.ErrorAs(t, err, &status)
		webhookLines := strings.TrimPrefix(status.Status().Message, `admission webhook "compositions.mutate.compositor.dev" denied the request: `)
		assert.Equal(t, "spec.service: is required (values.schema.json)\nspec.image.repository: registry \"docker.io\" is not allowed [policy no-docker-hub]", webhookLines)
		assert.Contains(t, stderr.String(), "\n"+webhookLines+"\n", "the CLI prints the webhook's lines byte for byte")
	})

	t.Run("a warn policy prints a warning and admits", func(t *testing.T) {
		res := cp.Kubectl(ctx, "apiVersion: composition.krateo.io/v1-1-5\nkind: FireworksApp\nmetadata: {name: lonely, namespace: fireworksapp-system}\nspec: {replicaCount: 1}\n", "apply", "-f", "-")
		require.NoError(t, res.Err, res.Stderr)
		assert.Equal(t, "Warning: [policy single-replica] one replica has no redundancy: set spec.replicaCount to 2 or more\n", res.Stderr)
	})

	t.Run("invalid Rego is refused with line and column", func(t *testing.T) {
		res := cp.Kubectl(ctx, `apiVersion: policy.compositor.dev/v1alpha1
kind: CompositionPolicy
metadata:
  name: broken-rego
spec:
  rego: |
    package compositor.broken

    deny contains msg if {
      msg := input.review.object.spec.
    }
`, "apply", "-f", "-")
		require.Error(t, res.Err)
		assert.Equal(t, `The CompositionPolicy "broken-rego" is invalid: spec.rego: Invalid value: 4:35: rego_parse_error: unexpected whitespace token: expected identifier`+"\n", res.Stderr)
	})

	t.Run("built-in policies guard definitions", func(t *testing.T) {
		res := cp.Kubectl(ctx, `apiVersion: core.krateo.io/v1alpha1
kind: CompositionDefinition
metadata:
  name: insecure
  namespace: fireworksapp-system
spec:
  chart:
    url: https://charts.example.com
    repo: fireworks-app
    version: 1.1.5
    insecureSkipVerifyTLS: true
    credentials:
      username: me
      passwordRef: {name: token, namespace: krateo-system, key: token}
`, "apply", "-f", "-")
		require.Error(t, res.Err)
		assert.Equal(t, `Error from server (Forbidden): error when creating "STDIN": admission webhook "validate.compositor.dev" denied the request: spec.chart.credentials.passwordRef.namespace: the password Secret must be in the definition's namespace "fireworksapp-system", not in "krateo-system" [policy credentials-namespace]
spec.chart.insecureSkipVerifyTLS: skipping TLS verification of the chart server is not allowed; give the server a certificate the cluster trusts [policy no-insecure-tls]
`, res.Stderr)
	})
}
