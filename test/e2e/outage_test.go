package e2e

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"helm.sh/helm/v3/pkg/chart"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/compositor-dev/compositor/test/controlplane"
)

// outageNamespace holds the definition and compositions of the outage test.
const outageNamespace = "outage"

var outageChart = &chart.Chart{
	Metadata: &chart.Metadata{APIVersion: chart.APIVersionV2, Name: "outage-app", Version: "0.1.0"},
	Values:   map[string]any{"value": "one"},
	Schema:   []byte(`{"type":"object","properties":{"value":{"type":"string","maxLength":10}},"additionalProperties":false}`),
	Templates: []*chart.File{{Name: "templates/cm.yaml", Data: []byte(
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
}
