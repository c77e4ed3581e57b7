package e2e

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	chartcommon "helm.sh/helm/v4/pkg/chart/common"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	corev1alpha1 "github.com/compositor-dev/compositor/api/core/v1alpha1"
	"github.com/compositor-dev/compositor/test/controlplane"
)

// outageNamespace holds the definition and compositions of the outage test.
const outageNamespace = "outage"

var outageChart = &chart.Chart{
	Metadata: &chart.Metadata{APIVersion: chart.APIVersionV2, Name: "outage-app", Version: "0.1.0"},
	Values:   map[string]any{"value": "one"},
	Schema:   []byte(`{"type":"object","properties":{"value":{"type":"string","maxLength":10}},"additionalProperties":false}`),
	Templates: []*chartcommon.File{{Name: "templates/cm.yaml", Data: []byte(
		"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: '{{ .Release.Name }}'}\ndata: {value: '{{ .Values.value }}'}\n")}},
}

func outageApp(name, value string) *unstructured.Unstructured {
	obj := &unstructured.Unstructured{}
	obj.SetAPIVersion("composition.krateo.io/v0-1-0")
	obj.SetKind("OutageApp")
	obj.SetNamespace(outageNamespace)
	obj.SetName(name)
	obj.Object["spec"] = map[string]any{"value": value}
	return obj
}

// conversionURL is where the API server sends the conversions of a generated CRD.
func conversionURL(t assert.TestingT, cp *controlplane.ControlPlane, name string) string {
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if !assert.NoError(t, cp.Client.Get(context.Background(), client.ObjectKey{Name: name}, crd)) {
		return ""
	}
	cc := crd.Spec.Conversion.Webhook.ClientConfig
	if cc.URL == nil {
		return ""
	}
	return *cc.URL
}

// Issue 16: with the chart source stopped, Compositor restarted on another address
// with an empty chart cache keeps the generated API readable: the CRD's conversion
// webhook follows the new address without any chart fetch.
func TestChartSourceOutageBlocksNobody(t *testing.T) {
	cp := controlplane.Start(t)
	ctx := context.Background()
	serve := newCompositorProcess(t, cp, "--chart-cache-dir", t.TempDir())
	serve.start()
	source := serveCharts(t, outageChart)
	applyDefinition(t, cp, source.URL, outageNamespace, "outage-app", "0.1.0")
	require.NoError(t, cp.Client.Create(ctx, outageApp("before", "one")))
	const crdName = "outageapps.composition.krateo.io"
	require.Equal(t, "https://"+serve.webhookAddr+"/convert", conversionURL(t, cp, crdName))

	source.Close()
	serve.stop(syscall.SIGTERM)
	// A new replica: another address and nothing of the chart on its disk.
	serve.webhookAddr = freePort(t)
	serve.args = []string{"--chart-cache-dir", t.TempDir()}
	serve.start()

	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, "https://"+serve.webhookAddr+"/convert", conversionURL(c, cp, crdName))
	}, time.Minute, 100*time.Millisecond, "the CRD's conversion webhook follows the new address")
	// Reads go through the conversion webhook: hub is the storage version.
	got := outageApp("before", "")
	require.NoError(t, cp.Client.Get(ctx, client.ObjectKeyFromObject(got), got))
	value, _, _ := unstructured.NestedString(got.Object, "spec", "value")
	assert.Equal(t, "one", value)

	// Admission judges from the chart kept in the cluster.
	require.NoError(t, cp.Client.Create(ctx, outageApp("after", "two")), "a valid composition is admitted")
	err := cp.Client.Create(ctx, outageApp("invalid", "far-too-long-a-value"))
	require.Error(t, err, "an invalid composition is refused")
	assert.Contains(t, err.Error(), "spec.value")
	assert.NotContains(t, err.Error(), "not available")
	require.NoError(t, cp.Client.Patch(ctx, got, client.RawPatch("application/merge-patch+json", []byte(`{"spec":{"value":"three"}}`))), "an update is admitted")
	// The in-process controllers install from the kept chart as well.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		for _, name := range []string{"before", "after"} {
			obj := outageApp(name, "")
			require.NoError(c, cp.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj))
			assert.True(c, isReady(*obj), name)
		}
	}, 2*time.Minute, 250*time.Millisecond)
	require.NoError(t, cp.Client.Delete(ctx, outageApp("after", "")), "a delete is admitted")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		err := cp.Client.Get(ctx, client.ObjectKeyFromObject(outageApp("after", "")), outageApp("after", ""))
		assert.True(c, apierrors.IsNotFound(err), "deleted: %v", err)
	}, 2*time.Minute, 250*time.Millisecond)

	// The served definition says that only new chart versions wait for the source.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		synced := definitionConditionOf(c, cp, outageNamespace, "outage-app", corev1alpha1.ConditionSynced)
		if assert.NotNil(c, synced, corev1alpha1.ConditionSynced) {
			assert.Equal(c, "ChartFetchFailed", synced.Reason)
			assert.Contains(c, synced.Message, "goes on being served and judged from the chart kept in the cluster")
		}
		ready := definitionConditionOf(c, cp, outageNamespace, "outage-app", corev1alpha1.ConditionReady)
		if assert.NotNil(c, ready, corev1alpha1.ConditionReady) {
			assert.Equal(c, metav1.ConditionTrue, ready.Status)
		}
	}, time.Minute, 250*time.Millisecond)
	// A new definition reports the outage.
	res := cp.Kubectl(ctx, strings.ReplaceAll(definition(source.URL, outageNamespace, "outage-new", "0.2.0"), "repo: fireworks-app", "repo: outage-app"), "apply", "-f", "-")
	require.NoError(t, res.Err, res.Stderr)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		synced := definitionConditionOf(c, cp, outageNamespace, "outage-new", corev1alpha1.ConditionSynced)
		if assert.NotNil(c, synced, corev1alpha1.ConditionSynced) {
			assert.Equal(c, "ChartFetchFailed", synced.Reason)
			assert.Contains(c, synced.Message, source.URL)
		}
	}, time.Minute, 250*time.Millisecond)
}
