// Package generatedkind serves tests a generated kind on a real control plane: the CRD
// Compositor generates for a small chart, without the rest of Compositor.
package generatedkind

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/compositor-dev/compositor/generators/crd"
	"github.com/compositor-dev/compositor/test/controlplane"
)

// Install installs in cp the CRD Compositor generates for a small chart named
// chartName (one string value, message), its one version stored as itself: no
// conversion webhook runs. It returns the kind's group, version and kind, and its
// plural, once the CRD is established.
func Install(t testing.TB, cp *controlplane.ControlPlane, chartName string) (schema.GroupVersionKind, string) {
	t.Helper()
	ch := &chart.Chart{
		Metadata: &chart.Metadata{APIVersion: chart.APIVersionV2, Name: chartName, Version: "0.1.0"},
		Values:   map[string]any{"message": "hello"},
		Schema:   []byte(`{"type":"object","properties":{"message":{"type":"string"}}}`),
	}
	obj, _, err := crd.ForChart(ch, crd.ConversionWebhook{URL: "https://compositor.invalid/convert"})
	require.NoError(t, err)
	obj.Spec.Versions = obj.Spec.Versions[:1]
	obj.Spec.Versions[0].Storage = true
	obj.Spec.Conversion = &apiextensionsv1.CustomResourceConversion{Strategy: apiextensionsv1.NoneConverter}
	ctx := context.Background()
	require.NoError(t, cp.Client.Create(ctx, obj))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		got := &apiextensionsv1.CustomResourceDefinition{}
		if assert.NoError(c, cp.Client.Get(ctx, client.ObjectKeyFromObject(obj), got)) {
			established := false
			for _, cond := range got.Status.Conditions {
				established = established || cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue
			}
			assert.True(c, established, "CRD %s established", obj.Name)
		}
	}, 30*time.Second, 50*time.Millisecond)
	return schema.GroupVersionKind{Group: obj.Spec.Group, Version: obj.Spec.Versions[0].Name, Kind: obj.Spec.Names.Kind}, obj.Spec.Names.Plural
}
