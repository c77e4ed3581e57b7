package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	corev1alpha1 "github.com/compositor-dev/compositor/api/core/v1alpha1"
	"github.com/compositor-dev/compositor/cmd/compositor/app"
	"github.com/compositor-dev/compositor/test/controlplane"
)

// deprecatedVersions are the served versions of crd marked deprecated.
func deprecatedVersions(crd *apiextensionsv1.CustomResourceDefinition) []string {
	var names []string
	for _, v := range crd.Spec.Versions {
		if v.Served && v.Deprecated {
			names = append(names, v.Name)
		}
	}
	return names
}

// The seed's journey, as a user runs it with one kubectl and one discovery cache
// throughout: the version an upgrade leaves stays served, deprecated, so a client
// that still speaks it (kubectl's cached discovery, a GitOps repository's manifests)
// keeps working, and its writes land on the version served now; after the grace
// period the version goes.
func TestAnUpgradeBreaksNoClientOfTheOldVersion(t *testing.T) {
	cp := controlplane.Start(t)
	startCompositor(t, cp, func(o *app.ServeOptions) { o.Controllers = app.ControllersInProcess })
	ctx := context.Background()
	readyDefinition(t, cp)

	// One discovery cache for every kubectl call, as a user's ~/.kube/cache.
	cache := t.TempDir()
	kubectl := func(stdin string, args ...string) controlplane.Result {
		return cp.Kubectl(ctx, stdin, append([]string{"--cache-dir", cache}, args...)...)
	}
	res := kubectl("", "get", "fireworksapp", "-A")
	require.NoError(t, res.Err, res.Stderr)

	const fa1 = "apiVersion: composition.krateo.io/v1-1-5\nkind: FireworksApp\nmetadata: {name: fa1, namespace: " + journeyNamespace + "}\nspec: {replicaCount: 1}\n"
	res = kubectl(fa1, "apply", "-f", "-")
	require.NoError(t, res.Err, res.Stderr)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, "fireworks-app-1.1.5 deployed", releaseOf(c, cp, "fa1"))
	}, 2*time.Minute, 250*time.Millisecond)

	res = kubectl("", "patch", "compositiondefinition", "fireworksapp-1-1-5", "-n", "fireworksapp-system", "--type", "merge", "-p", `{"spec":{"chart":{"version":"1.1.6"}}}`)
	require.NoError(t, res.Err, res.Stderr)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, "fireworks-app-1.1.6 deployed", releaseOf(c, cp, "fa1"))
	}, 3*time.Minute, 250*time.Millisecond)

	t.Run("the old version stays served, deprecated, and the definition says until when", func(t *testing.T) {
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			crd := &apiextensionsv1.CustomResourceDefinition{}
			require.NoError(c, cp.Client.Get(ctx, client.ObjectKey{Name: "fireworksapps.composition.krateo.io"}, crd))
			assert.Equal(c, []string{"v1-1-5", "v1-1-6", "hub"}, versionNames(crd))
			assert.Equal(c, []string{"v1-1-5"}, deprecatedVersions(crd))
			for _, v := range crd.Spec.Versions {
				if v.Name == "v1-1-5" && assert.NotNil(c, v.DeprecationWarning) {
					assert.Contains(c, *v.DeprecationWarning, "use composition.krateo.io/v1-1-6")
				}
			}
			def := &corev1alpha1.CompositionDefinition{}
			require.NoError(c, cp.Client.Get(ctx, client.ObjectKey{Namespace: "fireworksapp-system", Name: "fireworksapp-1-1-5"}, def))
			if assert.Len(c, def.Status.Retained, 1) {
				ret := def.Status.Retained[0]
				assert.Equal(c, "composition.krateo.io/v1-1-5", ret.APIVersion)
				if assert.NotNil(c, ret.DeprecatedSince) && assert.NotNil(c, ret.RemoveAfter) {
					assert.Equal(c, corev1alpha1.DefaultDeprecatedVersionGracePeriod, ret.RemoveAfter.Sub(ret.DeprecatedSince.Time))
				}
			}
		}, time.Minute, 250*time.Millisecond)
		// It costs nothing but the CRD entry: no RBAC (nor controller) of its own.
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			roles := &rbacv1.ClusterRoleList{}
			require.NoError(c, cp.Client.List(ctx, roles, client.MatchingLabels{"compositor.dev/version": "v1-1-5"}))
			assert.Empty(c, roles.Items, "the RBAC of v1-1-5 is gone")
		}, time.Minute, 250*time.Millisecond)
	})

	t.Run("kubectl with its cached discovery deletes the composition", func(t *testing.T) {
		res := kubectl("", "delete", "fireworksapp", "fa1", "-n", journeyNamespace, "--timeout", "120s")
		require.NoError(t, res.Err, res.Stderr)
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			assert.Empty(c, releaseOf(c, cp, "fa1"), "the release is gone")
		}, time.Minute, 250*time.Millisecond)
	})

	t.Run("a GitOps re-sync of the old manifest lands on the current version", func(t *testing.T) {
		res := kubectl(fa1, "apply", "-f", "-")
		require.NoError(t, res.Err, res.Stderr)
		assert.Contains(t, res.Stderr, "composition.krateo.io/v1-1-5 FireworksApp is deprecated", "the API server's warning")
		assert.Contains(t, res.Stderr, "it runs version v1-1-6 (chart 1.1.6)", "Compositor's")
		assert.Equal(t, "v1-1-6", compositionField(t, cp, "v1-1-6", "fa1", `{.metadata.labels.krateo\.io/composition-version}`))
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			assert.Equal(c, "fireworks-app-1.1.6 deployed", releaseOf(c, cp, "fa1"))
		}, 2*time.Minute, 250*time.Millisecond)

		// A manifest exported with its pin label names the deprecated version: it
		// lands on the current one too, since the old version runs nothing.
		const pinned = "apiVersion: composition.krateo.io/v1-1-5\nkind: FireworksApp\nmetadata: {name: fa2, namespace: " + journeyNamespace +
			", labels: {krateo.io/composition-version: v1-1-5}}\nspec: {replicaCount: 1}\n"
		res = kubectl(pinned, "apply", "-f", "-")
		require.NoError(t, res.Err, res.Stderr)
		assert.Contains(t, res.Stderr, "it runs version v1-1-6 (chart 1.1.6)")
		assert.Equal(t, "v1-1-6", compositionField(t, cp, "v1-1-6", "fa2", `{.metadata.labels.krateo\.io/composition-version}`))
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			assert.Equal(c, "fireworks-app-1.1.6 deployed", releaseOf(c, cp, "fa2"))
		}, 2*time.Minute, 250*time.Millisecond)
		// The next re-sync, an update naming the deprecated version again, moves nothing.
		res = kubectl(strings.Replace(pinned, "replicaCount: 1", "replicaCount: 2", 1), "apply", "-f", "-")
		require.NoError(t, res.Err, res.Stderr)
		assert.Equal(t, "v1-1-6", compositionField(t, cp, "v1-1-6", "fa2", `{.metadata.labels.krateo\.io/composition-version}`))
	})

	t.Run("a shorter grace period removes the version when it ends", func(t *testing.T) {
		res := kubectl("", "patch", "compositiondefinition", "fireworksapp-1-1-5", "-n", "fireworksapp-system", "--type", "merge", "-p", `{"spec":{"upgrade":{"deprecatedVersionGracePeriod":"1s"}}}`)
		require.NoError(t, res.Err, res.Stderr)
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			crd := &apiextensionsv1.CustomResourceDefinition{}
			require.NoError(c, cp.Client.Get(ctx, client.ObjectKey{Name: "fireworksapps.composition.krateo.io"}, crd))
			assert.Equal(c, []string{"v1-1-6", "hub"}, versionNames(crd))
		}, time.Minute, 250*time.Millisecond)
		res = kubectl("", "get", "crd", "fireworksapps.composition.krateo.io", "-o", "jsonpath={.spec.versions[*].name}")
		require.NoError(t, res.Err, res.Stderr)
		assert.Equal(t, "v1-1-6 hub", strings.TrimSpace(res.Stdout))
		// The composition is untouched.
		assert.Equal(t, "fireworks-app-1.1.6 deployed", releaseOf(t, cp, "fa1"))
	})
}

// releaseOf is "<chart> <status>" of the journey namespace's release name, "" when
// there is none.
func releaseOf(t assert.TestingT, cp *controlplane.ControlPlane, name string) string {
	r, ok := helmReleases(t, cp)[name]
	if !ok {
		return ""
	}
	return r.Chart + " " + r.Status
}
