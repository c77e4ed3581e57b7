package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	chartcommon "helm.sh/helm/v4/pkg/chart/common"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	chartutil "helm.sh/helm/v4/pkg/chart/v2/util"
	repo "helm.sh/helm/v4/pkg/repo/v1"
	appsv1 "k8s.io/api/apps/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/compositor-dev/compositor/cmd/compositor/app"
	"github.com/compositor-dev/compositor/test/chartserver"
	"github.com/compositor-dev/compositor/test/controlplane"
)

// onlyNginx refuses any image repository that is not nginx's.
const onlyNginx = `apiVersion: policy.compositor.dev/v1alpha1
kind: CompositionPolicy
metadata:
  name: only-nginx
spec:
  match:
    kinds: [{group: composition.krateo.io, kind: FireworksApp}]
  rego: |
    package compositor.onlynginx

    deny contains {"msg": sprintf("image %q is not nginx", [repository]), "path": "spec.image.repository"} if {
      repository := object.get(input.review.object.spec, ["image", "repository"], "nginx")
      not startswith(repository, "nginx")
    }
`

// deploymentImage is the image of the release's Deployment, as the API server has it.
func deploymentImage(t assert.TestingT, cp *controlplane.ControlPlane, namespace, release string) string {
	d := &appsv1.Deployment{}
	if !assert.NoError(t, cp.Client.Get(context.Background(), client.ObjectKey{Namespace: namespace, Name: release + "-fireworks-app"}, d)) {
		return ""
	}
	return d.Spec.Template.Spec.Containers[0].Image
}

// Issue 12, item 1: the conversion stash annotation is Compositor's alone. Values a
// client writes into it would be restored into the stored object after admission
// judged the spec without them, and installed.
func TestConversionStashCannotSmuggleValues(t *testing.T) {
	cp := controlplane.Start(t)
	startCompositor(t, cp, func(o *app.ServeOptions) { o.Controllers = app.ControllersInProcess })
	readyDefinition(t, cp)
	applyPolicies(t, cp, onlyNginx)
	ctx := context.Background()

	res := cp.Kubectl(ctx, fireworksApp("legit", 1), "apply", "-f", "-")
	require.NoError(t, res.Err, res.Stderr)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, "True", compositionField(c, cp, "v1-1-5", "legit", `{.status.conditions[?(@.type=="Ready")].status}`))
		assert.Equal(c, "nginx:1.27.0", deploymentImage(c, cp, "fireworksapp-system", "legit"))
	}, 2*time.Minute, 250*time.Millisecond)
	revision := revisions(t, cp, "legit")

	smuggled := func(name, stash string) string {
		return "apiVersion: composition.krateo.io/v1-1-5\nkind: FireworksApp\nmetadata:\n  name: " + name +
			"\n  namespace: fireworksapp-system\n  annotations:\n    compositor.dev/conversion-data: '" + stash + "'\nspec: {replicaCount: 1}\n"
	}
	for _, tc := range []struct {
		name, stash, refused string
	}{
		{"a value a deny policy refuses", `{"/spec/image":{"repository":"evil.io/miner","tag":"x"}}`, "/spec/image"},
		{"a value beyond the schema's maximum", `{"/spec/replicaCount":1000}`, "/spec/replicaCount"},
		{"a nested value under a field the object has", `{"/spec/service/type":"LoadBalancer","/spec/image/repository":"evil.io/miner"}`, "/spec/image/repository, /spec/service/type"},
	} {
		t.Run("an update cannot add "+tc.name, func(t *testing.T) {
			res := cp.Kubectl(ctx, smuggled("legit", tc.stash), "apply", "-f", "-")
			require.Error(t, res.Err, "admitted: %s", res.Stdout)
			assert.Contains(t, res.Stderr, `metadata.annotations[compositor.dev/conversion-data]: Forbidden: only Compositor's conversion writes this annotation`)
			assert.Contains(t, res.Stderr, "not add or change "+tc.refused)
		})
	}
	t.Run("a create cannot carry a stash", func(t *testing.T) {
		res := cp.Kubectl(ctx, smuggled("sneaky", `{"/spec/image":{"repository":"evil.io/miner","tag":"x"}}`), "apply", "-f", "-")
		require.Error(t, res.Err, "admitted: %s", res.Stdout)
		assert.Contains(t, res.Stderr, "only Compositor's conversion writes this annotation")
		assert.True(t, cp.Kubectl(ctx, "", "get", "fireworksapps.v1-1-5.composition.krateo.io", "sneaky", "-n", "fireworksapp-system").Err != nil, "sneaky was created")
	})
	t.Run("an unreadable stash is refused with the reason", func(t *testing.T) {
		res := cp.Kubectl(ctx, smuggled("legit", `{"/spec/image":`), "apply", "-f", "-")
		require.Error(t, res.Err, "admitted: %s", res.Stdout)
		assert.Contains(t, res.Stderr, "metadata.annotations[compositor.dev/conversion-data]: Invalid value: unreadable compositor.dev/conversion-data annotation")
	})

	// Nothing of the above reached the release: same revision, same image.
	res = cp.Kubectl(ctx, "", "annotate", "--overwrite", "fireworksapps.v1-1-5.composition.krateo.io", "legit", "-n", "fireworksapp-system", "e2e/touched=1")
	require.NoError(t, res.Err, res.Stderr)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Contains(c, eventReasons(c, cp, "legit"), "HelmSkip")
	}, 30*time.Second, 250*time.Millisecond)
	assert.Equal(t, revision, revisions(t, cp, "legit"))
	assert.Equal(t, "nginx:1.27.0", deploymentImage(t, cp, "fireworksapp-system", "legit"))
	stored := compositionField(t, cp, "v1-1-5", "legit", `{.spec}`)
	assert.NotContains(t, stored, "evil.io")
	assert.NotContains(t, stored, "1000")
}

// Issue 12, item 4: a served version whose chart no definition reports (the moment a
// version is added, or a CRD edited by hand) is refused, not admitted unjudged.
func TestAVersionWithoutAChartIsRefused(t *testing.T) {
	cp := controlplane.Start(t)
	startCompositor(t, cp)
	readyDefinition(t, cp)
	ctx := context.Background()

	res := cp.Kubectl(ctx, "", "annotate", "compositiondefinition", "fireworksapp-1-1-5", "-n", "fireworksapp-system", "krateo.io/paused=true")
	require.NoError(t, res.Err, res.Stderr)
	crd := &apiextensionsv1.CustomResourceDefinition{}
	require.NoError(t, cp.Client.Get(ctx, client.ObjectKey{Name: "fireworksapps.composition.krateo.io"}, crd))
	var added apiextensionsv1.CustomResourceDefinitionVersion
	for _, v := range crd.Spec.Versions {
		if v.Name == "v1-1-5" {
			added = *v.DeepCopy()
		}
	}
	added.Name = "v9-9-9"
	crd.Spec.Versions = append(crd.Spec.Versions, added)
	require.NoError(t, cp.Client.Update(ctx, crd))

	manifest := "apiVersion: composition.krateo.io/v9-9-9\nkind: FireworksApp\nmetadata: {name: unjudged, namespace: fireworksapp-system}\nspec: {replicaCount: 3}\n"
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		res := cp.Kubectl(ctx, manifest, "apply", "-f", "-")
		if assert.Error(c, res.Err, "admitted: %s", res.Stdout) {
			assert.Contains(c, res.Stderr, "no CompositionDefinition reports serving FireworksApp composition.krateo.io/v9-9-9 yet, so its chart's schema and policies cannot be applied")
		}
	}, time.Minute, 250*time.Millisecond)
	assert.Error(t, cp.Kubectl(ctx, "", "get", "fireworksapps.v9-9-9.composition.krateo.io", "unjudged", "-n", "fireworksapp-system").Err)
}

// serveCharts serves charts as a Helm repository on loopback for the test.
func serveCharts(t *testing.T, charts ...*chart.Chart) *chartserver.Repository {
	t.Helper()
	dir := t.TempDir()
	for _, ch := range charts {
		_, err := chartutil.Save(ch, dir)
		require.NoError(t, err)
	}
	index, err := repo.IndexDirectory(dir, "")
	require.NoError(t, err)
	require.NoError(t, index.WriteFile(filepath.Join(dir, "index.yaml"), 0o644))
	return chartserver.NewRepository(t, chartserver.RepositoryOptions{Dir: dir})
}

// applyDefinition applies a definition of chart name at version from repoURL in
// namespace (created) and waits until it is Ready.
func applyDefinition(t *testing.T, cp *controlplane.ControlPlane, repoURL, namespace, name, version string) {
	t.Helper()
	ctx := context.Background()
	res := cp.Kubectl(ctx, "", "create", "namespace", namespace)
	require.NoError(t, res.Err, res.Stderr)
	manifest := strings.ReplaceAll(definition(repoURL, namespace, name, version), "repo: fireworks-app", "repo: "+name)
	res = cp.Kubectl(ctx, manifest, "apply", "-f", "-")
	require.NoError(t, res.Err, res.Stderr)
	res = cp.Kubectl(ctx, "", "wait", "compositiondefinition", name, "-n", namespace, "--for", "condition=Ready=True", "--timeout", "120s")
	require.NoError(t, res.Err, res.Stderr)
}

// loopsChart is chart loops 0.1.0: a ConfigMap whose template loops size² times, size
// being the composition's value (at most 100,000).
func loopsChart() *chart.Chart {
	return &chart.Chart{
		Metadata: &chart.Metadata{APIVersion: chart.APIVersionV2, Name: "loops", Version: "0.1.0"},
		Values:   map[string]any{"size": 1},
		Schema:   []byte(`{"type":"object","properties":{"size":{"type":"integer","minimum":0,"maximum":100000}},"additionalProperties":false}`),
		Templates: []*chartcommon.File{{Name: "templates/cm.yaml", Data: []byte(`apiVersion: v1
kind: ConfigMap
metadata: {name: {{ .Release.Name }}}
data:
  x: "{{ range until (int .Values.size) }}{{ range until (int $.Values.size) }}{{ end }}{{ end }}"
`)}},
	}
}

// Issue 12, item 5: a template whose cost a composition chooses is stopped at the
// deadline with a denial that says so, and other writes are admitted meanwhile.
func TestRunawayTemplateIsDeniedAtTheDeadline(t *testing.T) {
	cp := controlplane.Start(t)
	startCompositor(t, cp, func(o *app.ServeOptions) { o.PolicyTimeout = 200 * time.Millisecond })
	ctx := context.Background()
	slow := loopsChart()
	applyDefinition(t, cp, serveCharts(t, slow).URL, "loops", "loops", "0.1.0")
	applyPolicies(t, cp, `apiVersion: policy.compositor.dev/v1alpha1
kind: CompositionPolicy
metadata:
  name: no-forbidden-configmaps
spec:
  target: rendered
  match:
    kinds: [{group: composition.krateo.io, kind: Loops}]
  rego: |
    package compositor.noforbidden

    deny contains "forbidden" if {
      some obj in input.rendered
      obj.metadata.name == "forbidden"
    }
`)
	loops := func(name string, n int) string {
		return fmt.Sprintf("apiVersion: composition.krateo.io/v0-1-0\nkind: Loops\nmetadata: {name: %s, namespace: loops}\nspec: {size: %d}\n", name, n)
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		res := cp.Kubectl(ctx, loops("forbidden", 1), "apply", "-f", "-")
		assert.Contains(c, res.Stderr, "forbidden [policy no-forbidden-configmaps]", "the rendered policy is in force")
	}, time.Minute, 250*time.Millisecond)

	res := cp.Kubectl(ctx, loops("runaway", 4000), "apply", "-f", "-")
	require.Error(t, res.Err, "admitted: %s", res.Stdout)
	assert.Contains(t, res.Stderr, "rendering chart loops was stopped at the deadline")
	assert.Contains(t, res.Stderr, "[policy no-forbidden-configmaps]")
	// A cheap composition is admitted after it. Under a loaded machine (the race
	// detector, a shared CI host) a 200 ms deadline can stop even a cheap render, which
	// is then refused at the deadline, as it should be: it is tried again, and must be
	// admitted by a try that finished in time.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		res := cp.Kubectl(ctx, loops("cheap", 3), "apply", "-f", "-")
		assert.NoError(c, res.Err, "a cheap composition is admitted: %s", res.Stderr)
	}, 30*time.Second, 500*time.Millisecond)
	assert.Error(t, cp.Kubectl(ctx, "", "get", "loops.v0-1-0.composition.krateo.io", "runaway", "-n", "loops").Err, "runaway was not stored")
}
