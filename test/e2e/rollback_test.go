package e2e

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/controller-runtime/pkg/client"

	corev1alpha1 "github.com/compositor-dev/compositor/api/core/v1alpha1"
	"github.com/compositor-dev/compositor/api/vocab"
	"github.com/compositor-dev/compositor/cmd/compositor/app"
	"github.com/compositor-dev/compositor/test/controlplane"
)

// forbidTwoReplicas is a policy added after revision 1 was installed: it forbids the
// values revision 1 has.
const forbidTwoReplicas = `apiVersion: policy.compositor.dev/v1alpha1
kind: CompositionPolicy
metadata:
  name: forbid-two-replicas
spec:
  match:
    kinds: [{group: composition.krateo.io, kind: FireworksApp}]
  rego: |
    package compositor.forbidtworeplicas

    deny contains {"msg": "2 replicas are forbidden since the incident", "path": "spec.replicaCount"} if {
      input.review.object.spec.replicaCount == 2
    }
`

// TestRollbackRestoresARevisionThroughAdmission follows issue #30's revisions: a
// FireworksApp created on 1.1.5 with values A (2 replicas), updated to values B (3),
// moved to 2.0.0; kubectl lists its revisions; `compositor rollback --to 1` restores
// values A and chart 1.1.5, as a new Helm revision. A policy added since that forbids
// values A refuses the same rollback with the policy's message, and a revision a
// tenant edited is refused as tampered.
func TestRollbackRestoresARevisionThroughAdmission(t *testing.T) {
	cp := controlplane.Start(t)
	startCompositor(t, cp, func(o *app.ServeOptions) { o.Controllers = app.ControllersInProcess })
	repo := sampleRepository(t)
	ctx := context.Background()
	kubectl := func(stdin string, args ...string) string {
		t.Helper()
		res := cp.Kubectl(ctx, stdin, args...)
		require.NoError(t, res.Err, "kubectl %v: %s", args, res.Stderr)
		return res.Stdout
	}
	releaseAt := func(chart, revision string) {
		t.Helper()
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			release := helmReleases(c, cp)["shop"]
			assert.Equal(c, chart, release.Chart)
			assert.Equal(c, revision, release.Revision)
			assert.Equal(c, "deployed", release.Status)
		}, 2*time.Minute, 250*time.Millisecond)
	}
	revisionsOfShop := func(c assert.TestingT) map[int64]corev1alpha1.CompositionRevision {
		list := &corev1alpha1.CompositionRevisionList{}
		assert.NoError(c, cp.Client.List(ctx, list, client.InNamespace(journeyNamespace), client.MatchingLabels{vocab.LabelCompositionName: "shop"}))
		out := map[int64]corev1alpha1.CompositionRevision{}
		for _, r := range list.Items {
			out[r.Revision] = r
		}
		return out
	}
	waitRevision := func(n int64, chart string) {
		t.Helper()
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			rev, ok := revisionsOfShop(c)[n]
			if assert.True(c, ok, "revision %d recorded", n) {
				assert.Equal(c, chart, rev.ChartVersion)
			}
		}, time.Minute, 250*time.Millisecond)
	}
	rollback := func(to string) (string, error) {
		var out bytes.Buffer
		_, err := app.RunRollback(ctx, &out, &app.RollbackOptions{Namespace: journeyNamespace, To: to, Kubeconfig: cp.Kubeconfig}, "fireworksapp/shop")
		return out.String(), err
	}
	replicas := func(version string) string {
		return compositionField(t, cp, version, "shop", "{.spec.replicaCount}")
	}

	kubectl("", "create", "namespace", journeyNamespace)
	kubectl(definition(repo.URL, journeyNamespace, "fireworksapp-1-1-5", "1.1.5"), "apply", "-f", "-")
	kubectl("", "wait", "compositiondefinition", "fireworksapp-1-1-5", "-n", journeyNamespace, "--for", "condition=Ready=True", "--timeout", "120s")

	// Values A on 1.1.5, then values B: revisions 1 and 2.
	shop := "apiVersion: composition.krateo.io/v1-1-5\nkind: FireworksApp\nmetadata: {name: shop, namespace: " + journeyNamespace + "}\nspec: {replicaCount: 2}\n"
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		res := cp.Kubectl(ctx, shop, "apply", "-f", "-")
		assert.NoError(c, res.Err, res.Stderr)
	}, time.Minute, 250*time.Millisecond)
	releaseAt("fireworks-app-1.1.5", "1")
	waitRevision(1, "1.1.5")
	kubectl("", "patch", "fireworksapps.v1-1-5.composition.krateo.io", "shop", "-n", journeyNamespace, "--type", "merge", "-p", `{"spec":{"replicaCount":3}}`)
	releaseAt("fireworks-app-1.1.5", "2")
	waitRevision(2, "1.1.5")

	// The definition of 2.0.0 next to it, and the composition moved there: revision 3.
	kubectl(definition(repo.URL, journeyNamespace, "fireworksapp-2-0-0", "2.0.0"), "apply", "-f", "-")
	kubectl("", "wait", "compositiondefinition", "fireworksapp-2-0-0", "-n", journeyNamespace, "--for", "condition=Ready=True", "--timeout", "120s")
	kubectl("", "label", "--overwrite", "fireworksapps.v1-1-5.composition.krateo.io", "shop", "-n", journeyNamespace, "krateo.io/composition-version=v2-0-0")
	releaseAt("fireworks-app-2.0.0", "3")
	waitRevision(3, "2.0.0")

	// kubectl lists them, as Compositor recorded them.
	listed := kubectl("", "get", "compositionrevisions", "-n", journeyNamespace, "-l", vocab.LabelCompositionName+"=shop", "-o", "wide")
	for _, want := range []string{"COMPOSITION", "REVISION", "CHART VERSION", "AUTHOR", "DIGEST", "FINGERPRINT", "fireworksapp.shop.1", "fireworksapp.shop.2", "fireworksapp.shop.3", "2.0.0"} {
		assert.Contains(t, listed, want)
	}
	revs := revisionsOfShop(t)
	assert.JSONEq(t, `{"replicaCount":2}`, string(revs[1].Spec.Raw))
	assert.JSONEq(t, `{"replicaCount":3}`, string(revs[2].Spec.Raw))
	assert.Equal(t, "v1-1-5", revs[1].ServedVersion)
	assert.Equal(t, "v2-0-0", revs[3].ServedVersion)
	assert.NotEmpty(t, revs[1].Author, "the author of the spec, as the API server authenticated them")
	assert.Equal(t, revs[1].Author, compositionField(t, cp, "v2-0-0", "shop", `{.metadata.annotations.compositor\.dev/spec-author}`))

	// Rolled back to revision 1: values A, chart 1.1.5, installed as revision 4.
	out, err := rollback("1")
	require.NoError(t, err)
	assert.Contains(t, out, "FireworksApp "+journeyNamespace+"/shop: restored revision 1 (chart 1.1.5, version v1-1-5")
	assert.Equal(t, "v1-1-5", compositionField(t, cp, "v1-1-5", "shop", `{.metadata.labels.krateo\.io/composition-version}`))
	assert.Equal(t, "2", replicas("v1-1-5"))
	assert.Empty(t, compositionField(t, cp, "v1-1-5", "shop", `{.metadata.annotations.compositor\.dev/rollback-to}`), "the annotation is removed")
	releaseAt("fireworks-app-1.1.5", "4")
	values := cp.Helm(ctx, "get", "values", "shop", "-n", journeyNamespace, "-o", "json")
	require.NoError(t, values.Err, values.Stderr)
	assert.JSONEq(t, `{"replicaCount":2}`, values.Stdout)
	waitRevision(4, "1.1.5")

	// Values C, then a policy that forbids values A: the same rollback is refused, with
	// the policy's message, and nothing changes.
	kubectl("", "patch", "fireworksapps.v1-1-5.composition.krateo.io", "shop", "-n", journeyNamespace, "--type", "merge", "-p", `{"spec":{"replicaCount":4}}`)
	releaseAt("fireworks-app-1.1.5", "5")
	kubectl(forbidTwoReplicas, "apply", "-f", "-")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		res := cp.Kubectl(ctx, "", "patch", "fireworksapps.v1-1-5.composition.krateo.io", "shop", "-n", journeyNamespace, "--dry-run=server", "--type", "merge", "-p", `{"spec":{"replicaCount":2}}`)
		assert.Error(c, res.Err, "the policy is in force")
	}, time.Minute, 250*time.Millisecond)
	_, err = rollback("1")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "2 replicas are forbidden since the incident")
	assert.Equal(t, "4", replicas("v1-1-5"))

	// A revision a tenant edited is refused as tampered; one that is not kept, as
	// missing; both name the annotation.
	kubectl("", "patch", "compositionrevision", "fireworksapp.shop.2", "-n", journeyNamespace, "--type", "merge", "-p", `{"spec":{"replicaCount":5}}`)
	_, err = rollback("2")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "metadata.annotations[compositor.dev/rollback-to]")
	assert.Contains(t, err.Error(), "CompositionRevision "+journeyNamespace+"/fireworksapp.shop.2 was changed after Compositor wrote it")
	_, err = rollback("42")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "FireworksApp shop has no revision 42: it keeps revisions 5, 4, 3, 1")
	assert.Equal(t, "4", replicas("v1-1-5"))

	// Without the policy's objection, the previous revision (4, values A) comes back.
	kubectl("", "delete", "compositionpolicy", "forbid-two-replicas")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		res := cp.Kubectl(ctx, "", "patch", "fireworksapps.v1-1-5.composition.krateo.io", "shop", "-n", journeyNamespace, "--dry-run=server", "--type", "merge", "-p", `{"spec":{"replicaCount":2}}`)
		assert.NoError(c, res.Err, "the policy is gone")
	}, time.Minute, 250*time.Millisecond)
	out, err = rollback("")
	require.NoError(t, err)
	assert.Contains(t, out, "restored revision 4 (chart 1.1.5")
	assert.Equal(t, "2", replicas("v1-1-5"))
	releaseAt("fireworks-app-1.1.5", "6")

	// Revision 3 ran v2-0-0: written through v1-1-5, its spec is converted for the
	// write and comes back whole to v2-0-0's controller, which installs chart 2.0.0.
	var buf bytes.Buffer
	_, err = app.RunRollback(ctx, &buf, &app.RollbackOptions{Namespace: journeyNamespace, To: "3", Kubeconfig: cp.Kubeconfig}, "fireworksapps.v1-1-5.composition.krateo.io/shop")
	require.NoError(t, err)
	assert.Contains(t, buf.String(), "restored revision 3 (chart 2.0.0, version v2-0-0")
	assert.Equal(t, "v2-0-0", compositionField(t, cp, "v2-0-0", "shop", `{.metadata.labels.krateo\.io/composition-version}`))
	assert.Equal(t, "3", replicas("v2-0-0"))
	releaseAt("fireworks-app-2.0.0", "7")
	rev3 := revisionsOfShop(t)[3]
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		rev, ok := revisionsOfShop(c)[7]
		if assert.True(c, ok) {
			assert.Equal(c, rev3.Fingerprint, rev.Fingerprint, "the same chart and values as revision 3")
		}
	}, time.Minute, 250*time.Millisecond)

	// The revisions go with the composition, the tampered one included.
	kubectl("", "delete", "fireworksapps.v2-0-0.composition.krateo.io", "shop", "-n", journeyNamespace, "--timeout", "2m")
	left := kubectl("", "get", "compositionrevisions", "-n", journeyNamespace, "-o", "name")
	assert.Empty(t, strings.TrimSpace(left), "no revision outlives its composition")
}
