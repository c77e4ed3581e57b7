package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/compositor-dev/compositor/generators/controller"
	"github.com/compositor-dev/compositor/generators/crd"
	"github.com/compositor-dev/compositor/generators/rbac"
	"github.com/compositor-dev/compositor/test/controlplane"
	"github.com/compositor-dev/compositor/test/samplecharts"
)

// definition is a CompositionDefinition of the sample chart at version in namespace.
func definition(repoURL, namespace, name, version string) string {
	return `apiVersion: core.krateo.io/v1alpha1
kind: CompositionDefinition
metadata:
  name: ` + name + `
  namespace: ` + namespace + `
spec:
  chart:
    repo: fireworks-app
    url: ` + repoURL + `
    version: ` + version + "\n"
}

func TestSeveralDefinitionsOfOneChart(t *testing.T) {
	cp := controlplane.Start(t)
	startCompositor(t, cp)
	repo := sampleRepository(t)
	ctx := context.Background()

	for _, ns := range []string{"team-a", "team-b"} {
		res := cp.Kubectl(ctx, "", "create", "namespace", ns)
		require.NoError(t, res.Err, res.Stderr)
	}
	for _, def := range [][3]string{{"team-a", "fireworks-115", "1.1.5"}, {"team-b", "fireworks-115", "1.1.5"}, {"team-b", "fireworks-200", "2.0.0"}} {
		res := cp.Kubectl(ctx, definition(repo.URL, def[0], def[1], def[2]), "apply", "-f", "-")
		require.NoError(t, res.Err, res.Stderr)
	}
	for _, def := range [][2]string{{"team-a", "fireworks-115"}, {"team-b", "fireworks-115"}, {"team-b", "fireworks-200"}} {
		res := cp.Kubectl(ctx, "", "wait", "compositiondefinition", def[1], "-n", def[0], "--for", "condition=Ready=True", "--timeout", "120s")
		require.NoError(t, res.Err, res.Stderr)
	}

	t.Run("both chart versions are served by one CRD", func(t *testing.T) {
		crdObj := &apiextensionsv1.CustomResourceDefinition{}
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			require.NoError(c, cp.Client.Get(ctx, client.ObjectKey{Name: "fireworksapps.composition.krateo.io"}, crdObj))
			assert.Equal(c, []string{"v1-1-5", "v2-0-0", "hub"}, versionNames(crdObj))
		}, time.Minute, 200*time.Millisecond)
	})

	// The controller of the definition in a composition's namespace owns it, else that
	// of the oldest definition; only the owner's identity is bound there.
	boundSubjects := func(c require.TestingT, namespace string) []string {
		list := &rbacv1.RoleBindingList{}
		require.NoError(c, cp.Client.List(ctx, list, client.InNamespace(namespace), client.MatchingLabels{"compositor.dev/version": "v1-1-5"}))
		var subjects []string
		for _, b := range list.Items {
			for _, s := range b.Subjects {
				subjects = append(subjects, s.Namespace+"/"+s.Name)
			}
		}
		return subjects
	}
	t.Run("a namespace is bound only for the definition that owns its compositions", func(t *testing.T) {
		res := cp.Kubectl(ctx, "", "create", "namespace", "team-c")
		require.NoError(t, res.Err, res.Stderr)
		for _, ns := range []string{"team-b", "team-c"} {
			res := cp.Kubectl(ctx, "apiVersion: composition.krateo.io/v1-1-5\nkind: FireworksApp\nmetadata: {name: owned, namespace: "+ns+"}\nspec: {replicaCount: 2}\n", "apply", "-f", "-")
			require.NoError(t, res.Err, res.Stderr)
		}
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			assert.Equal(c, []string{"compositor-system/" + rbac.ServiceAccountName("team-b", "fireworksapps", "v1-1-5")}, boundSubjects(c, "team-b"), "its own namespace's definition")
			assert.Equal(c, []string{"compositor-system/" + rbac.ServiceAccountName("team-a", "fireworksapps", "v1-1-5")}, boundSubjects(c, "team-c"), "the oldest definition")
		}, 30*time.Second, 100*time.Millisecond)
	})

	t.Run("definitions of one version in two namespaces keep their own objects", func(t *testing.T) {
		for _, ns := range []string{"team-a", "team-b"} {
			// Each its own controller, in Compositor's namespace, named for its
			// definition's namespace and labelled with it.
			d := &appsv1.Deployment{}
			require.NoError(t, cp.Client.Get(ctx, client.ObjectKey{Namespace: "compositor-system", Name: controller.Name(ns, "fireworksapps", "v1-1-5")}, d))
			assert.Equal(t, ns, d.Labels["compositor.dev/definition-namespace"])
			assert.Equal(t, "fireworks-115", d.Labels["compositor.dev/definition-name"])
			roles := &rbacv1.ClusterRoleList{}
			require.NoError(t, cp.Client.List(ctx, roles, client.MatchingLabels{"compositor.dev/definition-namespace": ns, "compositor.dev/version": "v1-1-5"}))
			assert.NotEmpty(t, roles.Items, "the RBAC of the definition in %s", ns)
		}
		// Deleting one leaves the version served for the other.
		res := cp.Kubectl(ctx, "", "delete", "compositiondefinition", "fireworks-115", "-n", "team-a", "--timeout", "120s")
		require.NoError(t, res.Err, res.Stderr)
		crdObj := &apiextensionsv1.CustomResourceDefinition{}
		require.NoError(t, cp.Client.Get(ctx, client.ObjectKey{Name: "fireworksapps.composition.krateo.io"}, crdObj))
		assert.Equal(t, []string{"v1-1-5", "v2-0-0", "hub"}, versionNames(crdObj))
		require.NoError(t, cp.Client.Get(ctx, client.ObjectKey{Namespace: "compositor-system", Name: controller.Name("team-b", "fireworksapps", "v1-1-5")}, &appsv1.Deployment{}))
		// The compositions of team-c pass to the remaining definition's controller.
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			assert.Equal(c, []string{"compositor-system/" + rbac.ServiceAccountName("team-b", "fireworksapps", "v1-1-5")}, boundSubjects(c, "team-c"))
		}, 30*time.Second, 100*time.Millisecond)
	})

	// No false rejections: every sample values file helm accepts is accepted through its
	// version, every one it refuses is refused (its keys nothing reads aside).
	for _, version := range []string{"1.1.5", "2.0.0"} {
		served, err := crd.VersionName(version)
		require.NoError(t, err)
		examples, err := samplecharts.Examples(version)
		require.NoError(t, err)
		require.NotEmpty(t, examples)
		for _, example := range examples {
			t.Run(version+"/"+example.Name, func(t *testing.T) {
				values := map[string]any{}
				require.NoError(t, yaml.Unmarshal(example.Values, &values))
				object, err := yaml.Marshal(map[string]any{
					"apiVersion": "composition.krateo.io/" + served,
					"kind":       "FireworksApp",
					"metadata":   map[string]any{"name": strings.ToLower(strings.TrimSuffix(example.Name, ".yaml")), "namespace": "team-b"},
					"spec":       values,
				})
				require.NoError(t, err)
				// --validate=warn: what is judged here is the schema; keys the chart
				// neither declares nor reads, which kubectl's default strict
				// validation refuses (issue 49), are warned of.
				res := cp.Kubectl(ctx, string(object), "create", "--dry-run=server", "--validate=warn", "-f", "-")
				if example.Valid {
					assert.NoError(t, res.Err, "a valid example is refused: %s", res.Stderr)
				} else {
					assert.Error(t, res.Err, "an invalid example is accepted")
				}
				if example.Valid && strings.Contains(example.Name, "extra-keys") {
					assert.Contains(t, res.Stderr, "has no such value", "its extra keys are warned of")
					strict := cp.Kubectl(ctx, string(object), "create", "--dry-run=server", "-f", "-")
					assert.Error(t, strict.Err, "kubectl's default strict validation admits keys nothing reads")
				}
			})
		}
	}
}
