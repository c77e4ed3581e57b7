package e2e

import (
	"bufio"
	"bytes"
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	chartcommon "helm.sh/helm/v4/pkg/chart/common"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/compositor-dev/compositor/cmd/compositor/app"
	"github.com/compositor-dev/compositor/test/controlplane"
)

// Issue 15: every generated kind runs on one controller runtime, with an informer per
// served version that stops with it. Three kinds install their compositions side by
// side; a second definition of one kind (another team's) adds a watch and takes it
// away when deleted; once the kind's last definition is gone, the API server holds no
// watch of it any more, and the other kinds still reconcile.
func TestGeneratedKindsShareOneRuntime(t *testing.T) {
	cp := controlplane.Start(t)
	startCompositor(t, cp, func(o *app.ServeOptions) { o.Controllers = app.ControllersInProcess })
	ctx := context.Background()

	names := []string{"alpha", "beta", "gamma"}
	var charts []*chart.Chart
	for _, name := range names {
		charts = append(charts, &chart.Chart{
			Metadata: &chart.Metadata{APIVersion: chart.APIVersionV2, Name: name, Version: "0.1.0"},
			Values:   map[string]any{"message": "hello"},
			Schema:   []byte(`{"type":"object","properties":{"message":{"type":"string"}},"additionalProperties":false}`),
			Templates: []*chartcommon.File{{Name: "templates/cm.yaml", Data: []byte(
				"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: {{ .Release.Name }}}\ndata: {message: {{ .Values.message | quote }}}\n")}},
		})
	}
	repo := serveCharts(t, charts...)
	for _, name := range names {
		applyDefinition(t, cp, repo.URL, name, name, "0.1.0")
	}
	kubectl := func(stdin string, args ...string) {
		t.Helper()
		res := cp.Kubectl(ctx, stdin, args...)
		require.NoError(t, res.Err, "kubectl %v: %s", args, res.Stderr)
	}
	applyComposition := func(name, message string) {
		t.Helper()
		kind := strings.ToUpper(name[:1]) + name[1:]
		manifest := "apiVersion: composition.krateo.io/v0-1-0\nkind: " + kind + "\nmetadata: {name: one, namespace: " + name + "}\nspec: {message: " + message + "}\n"
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			res := cp.Kubectl(ctx, manifest, "apply", "-f", "-")
			assert.NoError(c, res.Err, res.Stderr)
		}, time.Minute, 250*time.Millisecond)
	}
	installed := func(name, message string) {
		t.Helper()
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			cm := &corev1.ConfigMap{}
			if assert.NoError(c, cp.Client.Get(ctx, client.ObjectKey{Namespace: name, Name: "one"}, cm)) {
				assert.Equal(c, message, cm.Data["message"])
			}
		}, 2*time.Minute, 250*time.Millisecond, "the release of %s/one", name)
	}
	for _, name := range names {
		applyComposition(name, "hello-"+name)
	}
	for _, name := range names {
		installed(name, "hello-"+name)
	}
	for _, name := range names {
		assert.Positive(t, apiServerWatches(t, cp, name+"s"), "the API server watches %s", name+"s")
	}

	// A second team serves alpha from the same chart: a version of its own in the
	// runtime, with its own informer. When that definition goes, so does its watch, while
	// the kind stays served.
	before := apiServerWatches(t, cp, "alphas")
	applyDefinition(t, cp, repo.URL, "alpha-two", "alpha", "0.1.0")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, before+1, apiServerWatches(t, cp, "alphas"), "a watch for the second definition's controller")
	}, time.Minute, time.Second)
	kubectl("", "delete", "compositiondefinition", "alpha", "-n", "alpha-two", "--timeout", "120s")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, before, apiServerWatches(t, cp, "alphas"), "the second definition's watch is gone")
	}, time.Minute, time.Second)
	installed("alpha", "hello-alpha")

	kubectl("", "delete", "alphas.v0-1-0.composition.krateo.io", "one", "-n", "alpha", "--timeout", "120s")
	kubectl("", "delete", "compositiondefinition", "alpha", "-n", "alpha", "--timeout", "120s")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Zero(c, apiServerWatches(t, cp, "alphas"), "watches of a kind no definition serves")
	}, time.Minute, time.Second)

	// The other kinds' controllers go on: an update reaches its release.
	applyComposition("beta", "changed")
	installed("beta", "changed")
	assert.Positive(t, apiServerWatches(t, cp, "gammas"))
}

// apiServerWatches is the number of watches the API server serves on resource of the
// generated group, from its apiserver_longrunning_requests metric.
func apiServerWatches(t *testing.T, cp *controlplane.ControlPlane, resource string) int {
	t.Helper()
	clients, err := kubernetes.NewForConfig(cp.Config)
	require.NoError(t, err)
	body, err := clients.RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	require.NoError(t, err)
	total := 0
	lines := bufio.NewScanner(bytes.NewReader(body))
	lines.Buffer(make([]byte, 1<<20), 1<<20)
	for lines.Scan() {
		line := lines.Text()
		if !strings.HasPrefix(line, "apiserver_longrunning_requests{") || !strings.Contains(line, `verb="WATCH"`) ||
			!strings.Contains(line, `group="composition.krateo.io"`) || !strings.Contains(line, `resource="`+resource+`"`) {
			continue
		}
		fields := strings.Fields(line)
		n, err := strconv.ParseFloat(fields[len(fields)-1], 64)
		require.NoError(t, err, line)
		total += int(n)
	}
	require.NoError(t, lines.Err())
	return total
}
