package e2e

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"

	"github.com/compositor-dev/compositor/cmd/compositor/app"
	"github.com/compositor-dev/compositor/test/controlplane"
)

// TestClientsOfEveryVersion has clients of v1-1-5 and v2-0-0 work on the same
// compositions through kubectl while both versions are served, with chart 2.0.0's
// declared conversion of service.type to exposure: each reads its own version's truth
// in lists that mix compositions pinned to either version, and in a watch; a
// server-side apply through the older version that changes nothing changes neither the
// chart nor the release.
func TestClientsOfEveryVersion(t *testing.T) {
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
	kubectl("", "create", "namespace", journeyNamespace)
	kubectl(definition(repo.URL, journeyNamespace, "fireworksapp-1-1-5", "1.1.5"), "apply", "-f", "-")
	kubectl("", "wait", "compositiondefinition", "fireworksapp-1-1-5", "-n", journeyNamespace, "--for", "condition=Ready=True", "--timeout", "120s")
	const old = "apiVersion: composition.krateo.io/v1-1-5\nkind: FireworksApp\nmetadata: {name: old, namespace: fireworksapp-system}\nspec: {service: {type: LoadBalancer}}\n"
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.NoError(c, cp.Kubectl(ctx, old, "apply", "-f", "-").Err)
	}, time.Minute, 250*time.Millisecond)
	kubectl(definition(repo.URL, journeyNamespace, "fireworksapp-2-0-0", "2.0.0"), "apply", "-f", "-")
	kubectl("", "wait", "compositiondefinition", "fireworksapp-2-0-0", "-n", journeyNamespace, "--for", "condition=Ready=True", "--timeout", "120s")
	const fresh = "apiVersion: composition.krateo.io/v2-0-0\nkind: FireworksApp\nmetadata: {name: fresh, namespace: fireworksapp-system}\nspec: {exposure: internal}\n"
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.NoError(c, cp.Kubectl(ctx, fresh, "apply", "-f", "-").Err)
	}, time.Minute, 250*time.Millisecond)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		releases := helmReleases(c, cp)
		assert.Equal(c, "fireworks-app-1.1.5", releases["old"].Chart)
		assert.Equal(c, "fireworks-app-2.0.0", releases["fresh"].Chart)
	}, 2*time.Minute, 250*time.Millisecond)

	// Lists through either version show every composition in that version's terms,
	// whichever version each is pinned to.
	list := func(version, jsonpath string) string {
		return kubectl("", "get", "fireworksapps."+version+".composition.krateo.io", "-n", journeyNamespace, "-o", "jsonpath="+jsonpath)
	}
	assert.Equal(t, "fresh=internal old=public", strings.TrimSpace(list("v2-0-0", `{range .items[*]}{.metadata.name}={.spec.exposure} {end}`)))
	assert.Equal(t, "fresh=ClusterIP old=LoadBalancer", strings.TrimSpace(list("v1-1-5", `{range .items[*]}{.metadata.name}={.spec.service.type} {end}`)))

	// A watch through v2-0-0 sees a v1-1-5 client's change in v2-0-0's terms.
	gvr := schema.GroupVersionResource{Group: "composition.krateo.io", Version: "v2-0-0", Resource: "fireworksapps"}
	w, err := dynamic.NewForConfigOrDie(cp.Config).Resource(gvr).Namespace(journeyNamespace).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=old"})
	require.NoError(t, err)
	defer w.Stop()
	kubectl("", "patch", "fireworksapps.v1-1-5.composition.krateo.io", "old", "-n", journeyNamespace, "--type", "merge", "-p", `{"spec":{"service":{"type":"ClusterIP"}}}`)
	seen := false
	for !seen {
		select {
		case ev := <-w.ResultChan():
			if obj, ok := ev.Object.(*unstructured.Unstructured); ok && ev.Type == watch.Modified {
				exposure, _, _ := unstructured.NestedString(obj.Object, "spec", "exposure")
				seen = exposure == "internal"
			}
		case <-time.After(30 * time.Second):
			t.Fatal("the watch through v2-0-0 never showed exposure: internal")
		}
	}

	// A server-side apply through v1-1-5 of what fresh already says changes nothing:
	// fresh stays pinned to v2-0-0, on chart 2.0.0, at the same revision.
	revision := helmReleases(t, cp)["fresh"].Revision
	generation := compositionField(t, cp, "v2-0-0", "fresh", "{.metadata.generation}")
	const sameThroughV115 = "apiVersion: composition.krateo.io/v1-1-5\nkind: FireworksApp\nmetadata: {name: fresh, namespace: fireworksapp-system}\nspec: {service: {type: ClusterIP}}\n"
	kubectl(sameThroughV115, "apply", "--server-side", "--field-manager", "team-v1", "-f", "-")
	// The stored values did not change (the generation says so), so no controller has
	// anything to install.
	assert.Equal(t, generation, compositionField(t, cp, "v2-0-0", "fresh", "{.metadata.generation}"))
	release := helmReleases(t, cp)["fresh"]
	assert.Equal(t, "fireworks-app-2.0.0", release.Chart)
	assert.Equal(t, revision, release.Revision, "an apply that changes nothing upgrades nothing")
	assert.Equal(t, "v2-0-0", compositionField(t, cp, "v2-0-0", "fresh", `{.metadata.labels.krateo\.io/composition-version}`))
	assert.Equal(t, "internal", compositionField(t, cp, "v2-0-0", "fresh", "{.spec.exposure}"))

	// A v2-0-0 client that writes 1.1.5's service.type is told it wrote a value its
	// version does not have: refused by kubectl's default strict validation, as chart
	// 2.0.0 does not read it (issue 49), and warned of once with --validate=warn.
	const stray = "apiVersion: composition.krateo.io/v2-0-0\nkind: FireworksApp\nmetadata: {name: stray, namespace: fireworksapp-system}\nspec: {service: {type: NodePort}}\n"
	res := cp.Kubectl(ctx, stray, "apply", "-f", "-")
	require.Error(t, res.Err)
	assert.Contains(t, res.Stderr, "spec.service.type: Invalid value: FireworksApp v2-0-0 has no such value")
	res = cp.Kubectl(ctx, stray, "apply", "--validate=warn", "-f", "-")
	require.NoError(t, res.Err, res.Stderr)
	assert.Contains(t, res.Stderr, "Warning: spec.service.type is not a value of FireworksApp v2-0-0 (v1-1-5 has it): clients of v2-0-0 do not see it")
	assert.Equal(t, 1, strings.Count(res.Stderr, "spec.service.type"), res.Stderr)

	// managedFields stay usable: the v1-1-5 manager's fields read back through v1-1-5.
	var managed []metav1.ManagedFieldsEntry
	require.NoError(t, json.Unmarshal([]byte(kubectl("", "get", "fireworksapps.v1-1-5.composition.krateo.io", "fresh", "-n", journeyNamespace, "-o", "jsonpath={.metadata.managedFields}")), &managed))
	var managers []string
	for _, m := range managed {
		managers = append(managers, m.Manager)
	}
	assert.Contains(t, managers, "team-v1")
}
