package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/compositor-dev/compositor/cmd/compositor/app"
	"github.com/compositor-dev/compositor/generators/rbac"
	"github.com/compositor-dev/compositor/test/controlplane"
)

// TestMultiVersionManagement follows the seed README's "Multi-Version Management": the
// 1.1.5 definition is paused, a 2.0.0 definition of the same chart serves v2-0-0 next
// to v1-1-5. Which chart a composition runs is its pin, the label
// krateo.io/composition-version (issue #29): a write through another version changes
// only what it writes, and an explicit move (the label) hands the composition to the
// other version's controller, which upgrades the same release; moving back rolls it
// back.
func TestMultiVersionManagement(t *testing.T) {
	cp := controlplane.Start(t)
	startCompositor(t, cp, func(o *app.ServeOptions) { o.Controllers = app.ControllersInProcess })
	repo := sampleRepository(t)
	ctx := context.Background()

	kubectl := func(stdin string, args ...string) {
		t.Helper()
		res := cp.Kubectl(ctx, stdin, args...)
		require.NoError(t, res.Err, "kubectl %v: %s", args, res.Stderr)
	}
	waitReady := func(name string) {
		t.Helper()
		kubectl("", "wait", "compositiondefinition", name, "-n", journeyNamespace, "--for", "condition=Ready=True", "--timeout", "120s")
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
	const shop115 = "apiVersion: composition.krateo.io/v1-1-5\nkind: FireworksApp\nmetadata: {name: shop, namespace: fireworksapp-system}\nspec: {replicaCount: 2}\n"
	const shop200 = "apiVersion: composition.krateo.io/v2-0-0\nkind: FireworksApp\nmetadata: {name: shop, namespace: fireworksapp-system}\nspec: {replicaCount: 2, exposure: public}\n"

	kubectl("", "create", "namespace", journeyNamespace)
	kubectl(definition(repo.URL, journeyNamespace, "fireworksapp-1-1-5", "1.1.5"), "apply", "-f", "-")
	waitReady("fireworksapp-1-1-5")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.NoError(c, cp.Kubectl(ctx, shop115, "apply", "-f", "-").Err)
	}, time.Minute, 250*time.Millisecond)
	releaseAt("fireworks-app-1.1.5", "1")

	// Pause A, add B: both versions are served.
	kubectl("", "annotate", "--overwrite", "compositiondefinition", "fireworksapp-1-1-5", "-n", journeyNamespace, "krateo.io/paused=true")
	kubectl(definition(repo.URL, journeyNamespace, "fireworksapp-2-0-0", "2.0.0"), "apply", "-f", "-")
	waitReady("fireworksapp-2-0-0")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.NoError(c, cp.Kubectl(ctx, "", "get", "fireworksapps.v1-1-5.composition.krateo.io,fireworksapps.v2-0-0.composition.krateo.io", "-A").Err)
	}, time.Minute, 250*time.Millisecond)

	label := func(version string) {
		t.Helper()
		kubectl("", "label", "--overwrite", "fireworksapps.v2-0-0.composition.krateo.io", "shop", "-n", journeyNamespace, "krateo.io/composition-version="+version)
	}
	pinned := func() string {
		t.Helper()
		return compositionField(t, cp, "v2-0-0", "shop", `{.metadata.labels.krateo\.io/composition-version}`)
	}

	// Written through v2-0-0, the composition still runs 1.1.5's chart: the write changed
	// its values, not its pin, and kubectl says so.
	res := cp.Kubectl(ctx, shop200, "apply", "-f", "-")
	require.NoError(t, res.Err, res.Stderr)
	assert.Contains(t, res.Stderr, "FireworksApp shop runs the chart of version v1-1-5 (label krateo.io/composition-version); this write through v2-0-0 changed only what it wrote")
	assert.Equal(t, "v1-1-5", pinned())

	// Moved explicitly, by its label: B's controller upgrades the same release.
	label("v2-0-0")
	releaseAt("fireworks-app-2.0.0", "2")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.NoError(c, cp.Client.Get(ctx, client.ObjectKey{Namespace: journeyNamespace, Name: "shop-fireworks-app"}, &networkingv1.Ingress{}), "exposure: public renders an Ingress")
	}, time.Minute, 250*time.Millisecond)

	// A value only v2-0-0 allows (v1-1-5's maximum is 10) does not lock v1-1-5's
	// clients out: writes that leave it as it is are admitted, and change nothing.
	kubectl("", "patch", "fireworksapps.v2-0-0.composition.krateo.io", "shop", "-n", journeyNamespace, "--type", "merge", "-p", `{"spec":{"replicaCount":15}}`)
	releaseAt("fireworks-app-2.0.0", "3")
	assert.Equal(t, "15", compositionField(t, cp, "v1-1-5", "shop", "{.spec.replicaCount}"))
	representable := func(c *assert.CollectT) (string, string) {
		return compositionField(c, cp, "v2-0-0", "shop", `{.status.conditions[?(@.type=="Representable")].status}`),
			compositionField(c, cp, "v2-0-0", "shop", `{.status.conditions[?(@.type=="Representable")].message}`)
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		status, message := representable(c)
		assert.Equal(c, "False", status, "v1-1-5 cannot show 15 replicas: the composition says so")
		assert.Contains(c, message, "v1-1-5: spec.replicaCount: Invalid value: 15")
	}, time.Minute, 250*time.Millisecond)
	kubectl("", "label", "fireworksapps.v1-1-5.composition.krateo.io", "shop", "-n", journeyNamespace, "team=web")
	asV115 := cp.Kubectl(ctx, "", "get", "fireworksapps.v1-1-5.composition.krateo.io", "shop", "-n", journeyNamespace, "-o", "yaml")
	require.NoError(t, asV115.Err, asV115.Stderr)
	kubectl(asV115.Stdout, "replace", "-f", "-")
	res = cp.Kubectl(ctx, "", "patch", "fireworksapps.v1-1-5.composition.krateo.io", "shop", "-n", journeyNamespace, "--type", "merge", "-p", `{"spec":{"replicaCount":12}}`)
	require.Error(t, res.Err, "a new value beyond v1-1-5's schema is refused")
	assert.Contains(t, res.Stderr, "spec.replicaCount")

	// A write through v1-1-5, whose controller is paused, reaches the release through
	// v2-0-0's: the chart stays 2.0.0.
	kubectl("", "patch", "fireworksapps.v1-1-5.composition.krateo.io", "shop", "-n", journeyNamespace, "--type", "merge", "-p", `{"spec":{"replicaCount":3}}`)
	releaseAt("fireworks-app-2.0.0", "4")
	assert.Equal(t, "v2-0-0", pinned())
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		status, _ := representable(c)
		assert.Equal(c, "True", status)
	}, time.Minute, 250*time.Millisecond)

	// A label naming a version no definition serves is refused, and moves nothing.
	res = cp.Kubectl(ctx, "", "label", "--overwrite", "fireworksapps.v2-0-0.composition.krateo.io", "shop", "-n", journeyNamespace, "krateo.io/composition-version=v9-9-9")
	require.Error(t, res.Err)
	assert.Contains(t, res.Stderr, `metadata.labels[krateo.io/composition-version]: Invalid value: "v9-9-9": no CompositionDefinition serves FireworksApp version v9-9-9 to namespace fireworksapp-system`)
	assert.Equal(t, "v2-0-0", pinned())

	// Roll back by the reverse steps.
	kubectl("", "annotate", "--overwrite", "compositiondefinition", "fireworksapp-2-0-0", "-n", journeyNamespace, "krateo.io/paused=true")
	kubectl("", "annotate", "--overwrite", "compositiondefinition", "fireworksapp-1-1-5", "-n", journeyNamespace, "krateo.io/paused=false")
	// Once reconciled, 1.1.5's controller may read and delete what 2.0.0's chart creates
	// and its own does not: get and delete on Ingresses, no more.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		role := &rbacv1.ClusterRole{}
		if !assert.NoError(c, cp.Client.Get(ctx, client.ObjectKey{Name: rbac.NamesFor(journeyNamespace, "fireworksapps", "v1-1-5").ReleaseRole}, role)) {
			return
		}
		assert.Contains(c, role.Rules, rbacv1.PolicyRule{APIGroups: []string{"networking.k8s.io"}, Resources: []string{"ingresses"}, Verbs: []string{"delete", "get"}})
	}, time.Minute, 250*time.Millisecond)
	label("v1-1-5")
	releaseAt("fireworks-app-1.1.5", "5")
	assert.Equal(t, "public", compositionField(t, cp, "v2-0-0", "shop", "{.spec.exposure}"), "what v1-1-5 does not know is kept")
	// Chart 2.0.0's declared conversion gives 1.1.5 what public meant.
	assert.Equal(t, "LoadBalancer", compositionField(t, cp, "v1-1-5", "shop", "{.spec.service.type}"))

	// Nothing of 2.0.0's release stays behind: its Ingress went with the move.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		err := cp.Client.Get(ctx, client.ObjectKey{Namespace: journeyNamespace, Name: "shop-fireworks-app"}, &networkingv1.Ingress{})
		assert.True(c, apierrors.IsNotFound(err), "the Ingress of chart 2.0.0 is gone: %v", err)
		assert.Equal(c, "True", compositionField(c, cp, "v1-1-5", "shop", `{.status.conditions[?(@.type=="Pruned")].status}`))
	}, time.Minute, 250*time.Millisecond)
}
