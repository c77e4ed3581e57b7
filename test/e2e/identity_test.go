package e2e

import (
	"context"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	chartutil "helm.sh/helm/v4/pkg/chart/v2/util"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/compositor-dev/compositor/cmd/compositor/app"
	"github.com/compositor-dev/compositor/generators/rbac"
	"github.com/compositor-dev/compositor/test/chartserver"
	"github.com/compositor-dev/compositor/test/controlplane"
)

// TestControllerActsAsTheGeneratedIdentity installs the test-only chart rbac-probe,
// whose object kind comes from its values: the default kind is granted by the RBAC
// generated from the chart, another kind is not, and the API server refuses it to the
// controller, which reports the refusal in the composition's status.
func TestControllerActsAsTheGeneratedIdentity(t *testing.T) {
	cp := controlplane.Start(t)
	startCompositor(t, cp, func(o *app.ServeOptions) { o.Controllers = app.ControllersInProcess })
	ctx := context.Background()

	probe, err := loader.Load(filepath.Join(controlplane.RepoRoot(), "test", "testdata", "charts", "rbac-probe"))
	require.NoError(t, err)
	dir := t.TempDir()
	_, err = chartutil.Save(probe, dir)
	require.NoError(t, err)
	repo := chartserver.NewRepository(t, chartserver.RepositoryOptions{Dir: dir})

	kubectl := func(stdin string, args ...string) {
		t.Helper()
		res := cp.Kubectl(ctx, stdin, args...)
		require.NoError(t, res.Err, "kubectl %v: %s", args, res.Stderr)
	}
	kubectl("", "create", "namespace", "probes")
	kubectl("apiVersion: core.krateo.io/v1alpha1\nkind: CompositionDefinition\nmetadata: {name: rbac-probe, namespace: probes}\nspec: {chart: {repo: rbac-probe, url: "+repo.URL+", version: 0.1.0}}\n", "apply", "-f", "-")
	kubectl("", "wait", "compositiondefinition", "rbac-probe", "-n", "probes", "--for", "condition=Ready=True", "--timeout", "120s")

	apply := func(name, kind string) {
		t.Helper()
		manifest := "apiVersion: composition.krateo.io/v0-1-0\nkind: RbacProbe\nmetadata: {name: " + name + ", namespace: probes}\nspec: {kind: " + kind + "}\n"
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			assert.NoError(c, cp.Kubectl(ctx, manifest, "apply", "-f", "-").Err)
		}, time.Minute, 250*time.Millisecond)
	}
	ready := func(c assert.TestingT, name string) (string, string) {
		res := cp.Kubectl(ctx, "", "get", "rbacprobes.v0-1-0.composition.krateo.io", name, "-n", "probes", "-o",
			`jsonpath={.status.conditions[?(@.type=="Ready")].status}|{.status.conditions[?(@.type=="Ready")].message}`)
		assert.NoError(c, res.Err, res.Stderr)
		status, message, _ := strings.Cut(res.Stdout, "|")
		return status, message
	}

	apply("granted", "ConfigMap")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		status, message := ready(c, "granted")
		assert.Equal(c, "True", status, message)
		assert.NoError(c, cp.Client.Get(ctx, client.ObjectKey{Namespace: "probes", Name: "granted-probe"}, &corev1.ConfigMap{}))
	}, 2*time.Minute, 250*time.Millisecond)

	apply("refused", "ServiceAccount")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		status, message := ready(c, "refused")
		assert.Equal(c, "False", status)
		assert.Contains(c, message, "forbidden")
		// Helm looks the object up before it creates it; either is refused.
		// The generated identity lives in Compositor's namespace, not the definition's.
		sa := "system:serviceaccount:compositor-system:" + rbac.ServiceAccountName("probes", "rbacprobes", "v0-1-0")
		assert.Regexp(c, `User "`+regexp.QuoteMeta(sa)+`" cannot (get|create) resource "serviceaccounts"`, message)
	}, 2*time.Minute, 250*time.Millisecond)
	err = cp.Client.Get(ctx, client.ObjectKey{Namespace: "probes", Name: "refused-probe"}, &corev1.ServiceAccount{})
	assert.Error(t, err, "the ServiceAccount was never created")
}
