package e2e

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	chartcommon "helm.sh/helm/v4/pkg/chart/common"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	chartutil "helm.sh/helm/v4/pkg/chart/v2/util"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/compositor-dev/compositor/cmd/compositor/app"
	"github.com/compositor-dev/compositor/test/chartserver"
	"github.com/compositor-dev/compositor/test/controlplane"
	"github.com/compositor-dev/compositor/test/samplecharts"
)

// Issue 13, item 2: one kind and version has one owner and one chart. A second team's
// definition of a chart with the same name and version but other content does not
// serve it, and the first team's compositions keep their schema and templates.
func TestOneOwnerPerGeneratedAPI(t *testing.T) {
	cp := controlplane.Start(t)
	startCompositor(t, cp, func(o *app.ServeOptions) { o.Controllers = app.ControllersInProcess })
	ctx := context.Background()
	original := sampleRepository(t)
	otherDir := t.TempDir()
	require.NoError(t, samplecharts.Package(otherDir))
	republish(t, otherDir)
	other := chartserver.NewRepository(t, chartserver.RepositoryOptions{Dir: otherDir})

	for _, ns := range []string{"team-a", "team-b"} {
		res := cp.Kubectl(ctx, "", "create", "namespace", ns)
		require.NoError(t, res.Err, res.Stderr)
	}
	res := cp.Kubectl(ctx, definition(original.URL, "team-a", "fireworks", "1.1.5"), "apply", "-f", "-")
	require.NoError(t, res.Err, res.Stderr)
	res = cp.Kubectl(ctx, "", "wait", "compositiondefinition", "fireworks", "-n", "team-a", "--for", "condition=Ready=True", "--timeout", "120s")
	require.NoError(t, res.Err, res.Stderr)
	owned := cp.Kubectl(ctx, "", "get", "compositiondefinition", "fireworks", "-n", "team-a", "-o", "jsonpath={.status.digest}").Stdout

	res = cp.Kubectl(ctx, definition(other.URL, "team-b", "fireworks", "1.1.5"), "apply", "-f", "-")
	require.NoError(t, res.Err, res.Stderr)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		out := cp.Kubectl(ctx, "", "get", "compositiondefinition", "fireworks", "-n", "team-b", "-o",
			`jsonpath={.status.conditions[?(@.type=="Ready")].status} {.status.conditions[?(@.type=="Ready")].reason} {.status.conditions[?(@.type=="Ready")].message}`).Stdout
		assert.Contains(c, out, "False APIOwnedElsewhere FireworksApp composition.krateo.io/v1-1-5 is served by CompositionDefinition team-a/fireworks from other chart content ("+owned)
	}, time.Minute, 250*time.Millisecond)
	assert.Empty(t, cp.Kubectl(ctx, "", "get", "compositiondefinition", "fireworks", "-n", "team-b", "-o", "jsonpath={.status.apiVersion}").Stdout,
		"team-b's definition reports serving nothing")

	// team-a's composition is judged by team-a's schema (at most 10 replicas, where
	// team-b's chart allows 3) and installed from team-a's templates.
	manifest := "apiVersion: composition.krateo.io/v1-1-5\nkind: FireworksApp\nmetadata: {name: web, namespace: team-a}\nspec: {replicaCount: 5}\n"
	res = cp.Kubectl(ctx, manifest, "apply", "-f", "-")
	require.NoError(t, res.Err, res.Stderr)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		out := cp.Kubectl(ctx, "", "get", "fireworksapps.v1-1-5.composition.krateo.io", "web", "-n", "team-a", "-o",
			`jsonpath={.status.conditions[?(@.type=="Ready")].status} {.status.digest}`).Stdout
		assert.Equal(c, "True "+owned, out)
	}, 2*time.Minute, 250*time.Millisecond)
	cm := &corev1.ConfigMap{}
	require.NoError(t, cp.Client.Get(ctx, client.ObjectKey{Namespace: "team-a", Name: "web-config"}, cm))
	assert.NotContains(t, cm.Data, "tampered", "installed from team-a's templates")
	res = cp.Kubectl(ctx, "", "get", "crd", "fireworksapps.composition.krateo.io", "-o", `jsonpath={.spec.versions[?(@.name=="v1-1-5")].schema.openAPIV3Schema.properties.spec.properties.replicaCount.maximum}`)
	require.NoError(t, res.Err, res.Stderr)
	assert.Equal(t, "10", res.Stdout, "the CRD keeps team-a's schema")
}

// Issue 13, item 1: a composition never takes over a Helm release it did not install,
// whatever its kind.
func TestAReleaseInstalledByHelmCannotBeTakenOver(t *testing.T) {
	cp := controlplane.Start(t)
	startCompositor(t, cp, func(o *app.ServeOptions) { o.Controllers = app.ControllersInProcess })
	readyDefinition(t, cp)
	ctx := context.Background()

	ops := &chart.Chart{
		Metadata:  &chart.Metadata{APIVersion: chart.APIVersionV2, Name: "opschart", Version: "1.0.0"},
		Templates: []*chartcommon.File{{Name: "templates/data.yaml", Data: []byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: precious-data}\ndata: {keep: \"yes\"}\n")}},
	}
	dir := t.TempDir()
	archive, err := chartutil.Save(ops, dir)
	require.NoError(t, err)
	res := cp.Helm(ctx, "install", "db", archive, "-n", "fireworksapp-system")
	require.NoError(t, res.Err, res.Stderr)

	takeover := "apiVersion: composition.krateo.io/v1-1-5\nkind: FireworksApp\nmetadata:\n  name: innocent\n  namespace: fireworksapp-system\n  annotations: {krateo.io/release-name: db}\nspec: {replicaCount: 1}\n"
	res = cp.Kubectl(ctx, takeover, "apply", "-f", "-")
	require.Error(t, res.Err, "admitted: %s", res.Stdout)
	assert.Contains(t, res.Stderr, `metadata.annotations[krateo.io/release-name]: Invalid value: "db": a Helm release "db" already exists in namespace fireworksapp-system, and a new composition never takes over a release it did not install: choose another release name`)

	res = cp.Helm(ctx, "history", "db", "-n", "fireworksapp-system", "-o", "json")
	require.NoError(t, res.Err, res.Stderr)
	var history []map[string]any
	require.NoError(t, json.Unmarshal([]byte(res.Stdout), &history))
	require.Len(t, history, 1, "the foreign release was not upgraded")
	assert.Equal(t, "opschart-1.0.0", history[0]["chart"])
	cm := &corev1.ConfigMap{}
	require.NoError(t, cp.Client.Get(ctx, client.ObjectKey{Namespace: "fireworksapp-system", Name: "precious-data"}, cm))
	assert.Equal(t, "yes", cm.Data["keep"])
}
