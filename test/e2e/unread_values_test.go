package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/compositor-dev/compositor/test/controlplane"
)

// Issue 49: a key of a composition's values that the chart neither declares nor reads
// is told through kubectl as the API server tells an unknown field of a built-in kind,
// after the field validation kubectl asks for: refused by default
// (--validate=strict), warned with --validate=warn, silent with --validate=false. A
// key only a template reads, and a key of a free-form map, are never told. A
// definition with spec.fieldValidation Strict makes every write strict.
func TestUnreadValuesFollowKubectlsFieldValidation(t *testing.T) {
	cp := controlplane.Start(t)
	startCompositor(t, cp)
	testChart(t, cp, "values-app")
	ctx := context.Background()
	manifest := func(name, spec string) string {
		return fmt.Sprintf("apiVersion: composition.krateo.io/v0-1-0\nkind: ValuesApp\nmetadata: {name: %s, namespace: values-app}\nspec: %s\n", name, spec)
	}
	const typo = "spec.replicaCuont: ValuesApp v0-1-0 has no such value (did you mean spec.replicaCount?)"
	const read = "{replicaCount: 2, logLevel: debug, image: {tag: '1.28'}, podAnnotations: {team: a, any-key: b}}"

	// Read by the template only, declared, or free-form: admitted, no warning, by
	// every validation.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		res := cp.Kubectl(ctx, manifest("read", read), "apply", "-f", "-")
		assert.NoError(c, res.Err, res.Stderr)
	}, time.Minute, 250*time.Millisecond)
	for _, validate := range []string{"--validate=strict", "--validate=warn", "--validate=false"} {
		res := cp.Kubectl(ctx, manifest("read", read), "apply", validate, "-f", "-")
		require.NoError(t, res.Err, res.Stderr)
		assert.NotContains(t, res.Stderr, "no such value", validate)
	}

	// A typo: refused by kubectl's default, naming the key, its version and the key
	// meant.
	res := cp.Kubectl(ctx, manifest("typo", "{replicaCuont: 3}"), "apply", "-f", "-")
	require.Error(t, res.Err, "kubectl apply (--validate=strict) admitted a typo")
	assert.Contains(t, res.Stderr, `The ValuesApp "typo" is invalid: spec.replicaCuont: Invalid value: ValuesApp v0-1-0 has no such value (did you mean spec.replicaCount?)`)
	assert.Contains(t, res.Stderr, "strict field validation")
	res = cp.Kubectl(ctx, "", "get", "valuesapps.composition.krateo.io", "typo", "-n", "values-app")
	assert.Error(t, res.Err, "nothing stored")

	// Warned, and stored as written, with --validate=warn.
	res = cp.Kubectl(ctx, manifest("typo", "{replicaCuont: 3, podAnnotations: {repliaCount: x}}"), "apply", "--validate=warn", "-f", "-")
	require.NoError(t, res.Err, res.Stderr)
	assert.Contains(t, res.Stderr, "Warning: "+typo)
	assert.Equal(t, 1, strings.Count(res.Stderr, "no such value"), "only the typo is warned of, not the free-form key:\n%s", res.Stderr)

	// An update is told only of what it changes: the stored typo is not warned again.
	res = cp.Kubectl(ctx, manifest("typo", "{replicaCuont: 3, image: {tga: x}}"), "apply", "--validate=warn", "-f", "-")
	require.NoError(t, res.Err, res.Stderr)
	assert.NotContains(t, res.Stderr, "replicaCuont", "unchanged")
	assert.Contains(t, res.Stderr, "spec.image.tga: ValuesApp v0-1-0 has no such value (did you mean spec.image.tag?)")

	// Silent with --validate=false.
	res = cp.Kubectl(ctx, manifest("ignored", "{replicaCuont: 3}"), "create", "--validate=false", "-f", "-")
	require.NoError(t, res.Err, res.Stderr)
	assert.NotContains(t, res.Stderr, "no such value")

	// A definition that makes every write strict: refused whatever the client asks,
	// and the values read still admitted.
	res = cp.Kubectl(ctx, "", "patch", "compositiondefinition", "values-app", "-n", "values-app", "--type", "merge", "-p", `{"spec":{"fieldValidation":"Strict"}}`)
	require.NoError(t, res.Err, res.Stderr)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		res := cp.Kubectl(ctx, manifest("strict", "{replicaCuont: 3}"), "create", "--validate=false", "-f", "-")
		if assert.Error(c, res.Err, "--validate=false admitted a typo under a strict definition") {
			assert.Contains(c, res.Stderr, "spec.replicaCuont: Invalid value: ValuesApp v0-1-0 has no such value (did you mean spec.replicaCount?)")
		}
	}, time.Minute, 250*time.Millisecond)
	res = cp.Kubectl(ctx, manifest("strict", "{replicaCuont: 3}"), "apply", "--validate=warn", "-f", "-")
	assert.Error(t, res.Err, "--validate=warn admitted a typo under a strict definition")
	res = cp.Kubectl(ctx, manifest("strict", read), "apply", "--validate=false", "-f", "-")
	require.NoError(t, res.Err, res.Stderr)
}
