package e2e

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/compositor-dev/compositor/cmd/compositor/app"
	"github.com/compositor-dev/compositor/generators/rbac"
	"github.com/compositor-dev/compositor/test/controlplane"
)

const journeyNamespace = "fireworksapp-system"

// helmRelease is one row of `helm list -o json`.
type helmRelease struct {
	Name     string `json:"name"`
	Revision string `json:"revision"`
	Status   string `json:"status"`
	Chart    string `json:"chart"`
}

// helmReleases lists the releases of the journey namespace by name, through the helm CLI.
func helmReleases(t assert.TestingT, cp *controlplane.ControlPlane) map[string]helmRelease {
	res := cp.Helm(context.Background(), "list", "-n", journeyNamespace, "-o", "json")
	if !assert.NoError(t, res.Err, res.Stderr) {
		return nil
	}
	var list []helmRelease
	if !assert.NoError(t, json.Unmarshal([]byte(res.Stdout), &list), res.Stdout) {
		return nil
	}
	releases := map[string]helmRelease{}
	for _, r := range list {
		releases[r.Name] = r
	}
	return releases
}

// revisions is the number of revisions in the release's history.
func revisions(t *testing.T, cp *controlplane.ControlPlane, name string) int {
	t.Helper()
	res := cp.Helm(context.Background(), "history", name, "-n", journeyNamespace, "-o", "json")
	require.NoError(t, res.Err, res.Stderr)
	var history []map[string]any
	require.NoError(t, json.Unmarshal([]byte(res.Stdout), &history))
	return len(history)
}

// eventReasons lists the reasons of the events about one composition.
func eventReasons(t assert.TestingT, cp *controlplane.ControlPlane, name string) []string {
	list := &corev1.EventList{}
	if !assert.NoError(t, cp.Client.List(context.Background(), list, client.InNamespace(journeyNamespace))) {
		return nil
	}
	var reasons []string
	for _, e := range list.Items {
		if e.InvolvedObject.Name == name && e.InvolvedObject.Kind == "FireworksApp" {
			reasons = append(reasons, e.Reason)
		}
	}
	return reasons
}

func compositionField(t assert.TestingT, cp *controlplane.ControlPlane, version, name, jsonpath string) string {
	res := cp.Kubectl(context.Background(), "", "get", "fireworksapps."+version+".composition.krateo.io", name, "-n", journeyNamespace, "-o", "jsonpath="+jsonpath)
	assert.NoError(t, res.Err, res.Stderr)
	return res.Stdout
}

// TestJourneyFromDefinitionToReleases follows the seed README against the local chart
// repository, with the composition controllers in process: definition → API →
// compositions → Helm releases → chart upgrade → deletion.
func TestJourneyFromDefinitionToReleases(t *testing.T) {
	cp := controlplane.Start(t)
	startCompositor(t, cp, func(o *app.ServeOptions) { o.Controllers = app.ControllersInProcess })
	ctx := context.Background()
	readyDefinition(t, cp)

	start := time.Now()
	for _, manifest := range []string{fireworksApp("app-one", 1), fireworksApp("app-two", 2)} {
		res := cp.Kubectl(ctx, manifest, "apply", "-f", "-")
		require.NoError(t, res.Err, res.Stderr)
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		releases := helmReleases(c, cp)
		for _, name := range []string{"app-one", "app-two"} {
			assert.Equal(c, "fireworks-app-1.1.5", releases[name].Chart, name)
			assert.Equal(c, "deployed", releases[name].Status, name)
		}
	}, 2*time.Minute, 250*time.Millisecond)
	t.Logf("both releases installed %s after the compositions were applied", time.Since(start).Round(time.Millisecond))

	for _, name := range []string{"app-one", "app-two"} {
		var owned []string
		for kind, list := range map[string]client.ObjectList{"deployment": &appsv1.DeploymentList{}, "service": &corev1.ServiceList{}, "configmap": &corev1.ConfigMapList{}} {
			require.NoError(t, cp.Client.List(ctx, list, client.InNamespace(journeyNamespace)))
			items, err := apimeta.ExtractList(list)
			require.NoError(t, err)
			for _, item := range items {
				if o, ok := item.(client.Object); ok && o.GetAnnotations()["meta.helm.sh/release-name"] == name {
					owned = append(owned, kind)
				}
			}
		}
		assert.ElementsMatch(t, []string{"deployment", "service", "configmap"}, owned, name)
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, "True", compositionField(c, cp, "v1-1-5", "app-one", `{.status.conditions[?(@.type=="Ready")].status}`))
		assert.Equal(c, "1.1.5 app-one", compositionField(c, cp, "v1-1-5", "app-one", `{.status.helmChartVersion} {.status.releaseName}`))
		assert.Contains(c, eventReasons(c, cp, "app-one"), "HelmInstalled")
	}, 30*time.Second, 250*time.Millisecond)
	definitionDigest := cp.Kubectl(ctx, "", "get", "compositiondefinition", "fireworksapp-1-1-5", "-n", "fireworksapp-system", "-o", "jsonpath={.status.digest}").Stdout
	assert.Regexp(t, `^sha256:[0-9a-f]{64}$`, definitionDigest)
	assert.Equal(t, definitionDigest, compositionField(t, cp, "v1-1-5", "app-one", "{.status.digest}"), "status.digest is the chart's")

	t.Run("an unchanged composition makes no new revision; a change makes one", func(t *testing.T) {
		res := cp.Kubectl(ctx, fireworksApp("app-one", 1), "apply", "-f", "-")
		require.NoError(t, res.Err, res.Stderr)
		// A new annotation wakes the controller without changing the values.
		res = cp.Kubectl(ctx, "", "annotate", "--overwrite", "fireworksapps.v1-1-5.composition.krateo.io", "app-one", "-n", journeyNamespace, "journey/touched=1")
		require.NoError(t, res.Err, res.Stderr)
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			assert.Contains(c, eventReasons(c, cp, "app-one"), "HelmSkip")
		}, 30*time.Second, 250*time.Millisecond)
		assert.Equal(t, 1, revisions(t, cp, "app-one"))

		res = cp.Kubectl(ctx, fireworksApp("app-one", 2), "apply", "-f", "-")
		require.NoError(t, res.Err, res.Stderr)
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			assert.Equal(c, "2", helmReleases(c, cp)["app-one"].Revision)
		}, time.Minute, 250*time.Millisecond)
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			assert.Contains(c, eventReasons(c, cp, "app-one"), "HelmUpgraded")
		}, 30*time.Second, 250*time.Millisecond)
		assert.Equal(t, 2, revisions(t, cp, "app-one"))
	})

	t.Run("a paused composition is left alone until unpaused", func(t *testing.T) {
		res := cp.Kubectl(ctx, "", "annotate", "--overwrite", "fireworksapps.v1-1-5.composition.krateo.io", "app-two", "-n", journeyNamespace, "krateo.io/paused=true")
		require.NoError(t, res.Err, res.Stderr)
		res = cp.Kubectl(ctx, fireworksApp("app-two", 3), "apply", "-f", "-")
		require.NoError(t, res.Err, res.Stderr)
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			got := compositionField(c, cp, "v1-1-5", "app-two", `{.status.conditions[?(@.type=="Synced")].reason} {.status.observedGeneration} {.metadata.generation}`)
			fields := strings.Fields(got)
			if assert.Len(c, fields, 3) {
				assert.Equal(c, "Paused", fields[0])
				assert.Equal(c, fields[2], fields[1], "observedGeneration")
			}
		}, 30*time.Second, 250*time.Millisecond)
		assert.Equal(t, 1, revisions(t, cp, "app-two"))

		res = cp.Kubectl(ctx, "", "annotate", "--overwrite", "fireworksapps.v1-1-5.composition.krateo.io", "app-two", "-n", journeyNamespace, "krateo.io/paused=false")
		require.NoError(t, res.Err, res.Stderr)
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			assert.Equal(c, "2", helmReleases(c, cp)["app-two"].Revision)
		}, time.Minute, 250*time.Millisecond)
	})

	t.Run("a new chart version upgrades every release", func(t *testing.T) {
		start := time.Now()
		res := cp.Kubectl(ctx, "", "patch", "compositiondefinition", "fireworksapp-1-1-5", "-n", journeyNamespace, "--type", "merge", "-p", `{"spec":{"chart":{"version":"1.1.6"}}}`)
		require.NoError(t, res.Err, res.Stderr)
		res = cp.Kubectl(ctx, "", "wait", "compositiondefinition", "fireworksapp-1-1-5", "-n", journeyNamespace, "--for", "jsonpath={.status.apiVersion}=composition.krateo.io/v1-1-6", "--timeout", "120s")
		require.NoError(t, res.Err, res.Stderr)
		res = cp.Kubectl(ctx, "", "wait", "compositiondefinition", "fireworksapp-1-1-5", "-n", journeyNamespace, "--for", "condition=Ready=True", "--timeout", "120s")
		require.NoError(t, res.Err, res.Stderr)
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			releases := helmReleases(c, cp)
			for _, name := range []string{"app-one", "app-two"} {
				assert.Equal(c, "fireworks-app-1.1.6", releases[name].Chart, name)
				assert.Equal(c, "deployed", releases[name].Status, name)
			}
		}, 2*time.Minute, 250*time.Millisecond)
		t.Logf("both releases at 1.1.6 %s after the definition was patched", time.Since(start).Round(time.Millisecond))
		assert.Equal(t, "1.1.6", compositionField(t, cp, "v1-1-6", "app-one", "{.status.helmChartVersion}"))
		// The 1.1.5 controller's identity is gone with it.
		err := cp.Client.Get(ctx, client.ObjectKey{Namespace: "compositor-system", Name: rbac.ServiceAccountName(journeyNamespace, "fireworksapps", "v1-1-5")}, &corev1.ServiceAccount{})
		assert.True(t, apierrors.IsNotFound(err), "the 1.1.5 ServiceAccount is gone: %v", err)
		// In process, no controller Deployment is generated.
		err = cp.Client.Get(ctx, client.ObjectKey{Namespace: "compositor-system", Name: rbac.ServiceAccountName(journeyNamespace, "fireworksapps", "v1-1-6")}, &appsv1.Deployment{})
		assert.True(t, apierrors.IsNotFound(err), "no controller Deployment in process: %v", err)
	})

	t.Run("deleting a composition uninstalls its release", func(t *testing.T) {
		res := cp.Kubectl(ctx, "", "delete", "fireworksapps.v1-1-6.composition.krateo.io", "app-one", "-n", journeyNamespace, "--timeout", "60s")
		require.NoError(t, res.Err, res.Stderr)
		releases := helmReleases(t, cp)
		assert.NotContains(t, releases, "app-one")
		assert.Contains(t, releases, "app-two")
		deployments := &appsv1.DeploymentList{}
		require.NoError(t, cp.Client.List(ctx, deployments, client.InNamespace(journeyNamespace)))
		for _, d := range deployments.Items {
			assert.NotEqual(t, "app-one", d.Annotations["meta.helm.sh/release-name"], d.Name)
		}
		assert.Contains(t, eventReasons(t, cp, "app-one"), "HelmUninstalled")
	})

	// TestControllerActsAsTheGeneratedIdentity shows the API server refusing what the
	// generated RBAC does not grant; here, the grant itself is kept in place.
	t.Run("a release binding deleted by hand is put back", func(t *testing.T) {
		binding := &rbacv1.RoleBinding{}
		binding.Namespace, binding.Name = journeyNamespace, "compositor:fireworksapp-system:fireworksapps-v1-1-6"
		require.NoError(t, cp.Client.Get(ctx, client.ObjectKeyFromObject(binding), binding))
		deleted := binding.UID
		require.NoError(t, cp.Client.Delete(ctx, binding))
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			again := &rbacv1.RoleBinding{}
			require.NoError(c, cp.Client.Get(ctx, client.ObjectKeyFromObject(binding), again))
			assert.NotEqual(c, deleted, again.UID, "a new binding")
			assert.Equal(c, binding.RoleRef, again.RoleRef)
			assert.Equal(c, binding.Subjects, again.Subjects)
		}, 30*time.Second, 100*time.Millisecond)

		res := cp.Kubectl(ctx, strings.ReplaceAll(fireworksApp("app-three", 2), "v1-1-5", "v1-1-6"), "apply", "-f", "-")
		require.NoError(t, res.Err, res.Stderr)
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			assert.Equal(c, "deployed", helmReleases(c, cp)["app-three"].Status)
		}, time.Minute, 250*time.Millisecond)
	})

	// Deleting a namespace deletes its RoleBindings at once, while its compositions wait
	// on their finalizers; nothing can be created in it any more. The release goes with
	// the namespace, and the composition must not hold the namespace's deletion up.
	// (envtest runs no namespace controller: the test deletes what it would.)
	t.Run("a composition in a namespace being deleted goes with it", func(t *testing.T) {
		const gone = "team-gone"
		composition := strings.NewReplacer("v1-1-5", "v1-1-6", "fireworksapp-system", gone).Replace(fireworksApp("app-gone", 2))
		for _, args := range [][]string{{"create", "namespace", gone}, {"apply", "-f", "-"}} {
			stdin := ""
			if args[0] == "apply" {
				stdin = composition
			}
			res := cp.Kubectl(ctx, stdin, args...)
			require.NoError(t, res.Err, res.Stderr)
		}
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			res := cp.Helm(ctx, "status", "app-gone", "-n", gone)
			assert.NoError(c, res.Err, res.Stderr)
		}, time.Minute, 250*time.Millisecond)

		res := cp.Kubectl(ctx, "", "delete", "namespace", gone, "--wait=false")
		require.NoError(t, res.Err, res.Stderr)
		require.NoError(t, cp.Client.DeleteAllOf(ctx, &rbacv1.RoleBinding{}, client.InNamespace(gone)))
		// kubectl waits until the finalizer is gone and the object with it.
		res = cp.Kubectl(ctx, composition, "delete", "-f", "-", "--timeout", "60s")
		require.NoError(t, res.Err, res.Stderr)
	})
}
