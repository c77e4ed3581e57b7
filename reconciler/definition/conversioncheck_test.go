package definition

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	"github.com/compositor-dev/compositor/conversion"
	"github.com/compositor-dev/compositor/conversion/conversiontest"
	"github.com/compositor-dev/compositor/generators/crd"
	"github.com/compositor-dev/compositor/internal/condition"
	"github.com/compositor-dev/compositor/test/samplecharts"
)

// A conversion check is kept for what it depends on, and only for that: the served
// versions' schemas and the declarations.
func TestConversionCheckIsKeptForTheSameCRD(t *testing.T) {
	fireworks, err := conversiontest.FireworksCRD(crd.ConversionWebhook{URL: "https://127.0.0.1/convert"})
	require.NoError(t, err)
	key := func(c *apiextensionsv1.CustomResourceDefinition) string {
		k, err := conversionCheckKey(c, "v2-0-0")
		require.NoError(t, err)
		return k
	}
	same := fireworks.DeepCopy()
	same.ResourceVersion, same.Labels = "7", map[string]string{"a": "b"}
	assert.Equal(t, key(fireworks), key(same), "what the check does not read changes nothing")

	declared := fireworks.DeepCopy()
	declared.Annotations["conversions.compositor.dev/v2-0-0"] = `{"chart":"2.0.0"}`
	assert.NotEqual(t, key(fireworks), key(declared), "other declarations")

	schema := fireworks.DeepCopy()
	schema.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"].Properties["replicaCount"] = apiextensionsv1.JSONSchemaProps{Type: "string"}
	assert.NotEqual(t, key(fireworks), key(schema), "another schema")

	// The reconciler checks once per key, and gives the same losses from then on.
	ch, err := samplecharts.Load("2.0.0")
	require.NoError(t, err)
	steps, err := crd.ChartConversions(ch)
	require.NoError(t, err)
	r := &Reconciler{}
	for range 2 {
		api := &generatedAPI{Version: "v2-0-0", Conversions: steps}
		require.NoError(t, r.checkConversions(fireworks, api))
		require.Len(t, api.ConversionLosses, 1)
		assert.Equal(t, "service.type", api.ConversionLosses[0].Path)
	}
	assert.Equal(t, 1, r.checked.Len())

	// A refusal is kept too, and names its reason.
	lossy := fireworks.DeepCopy()
	lossy.Annotations["conversions.compositor.dev/v2-0-0"] = `{"chart":"2.0.0","steps":[{"from":"1.1.6","to":"2.0.0","rules":[{"move":"service.type","to":"exposure","map":{"ClusterIP":"internal","NodePort":"public","LoadBalancer":"public"},"reverse":{"internal":"ClusterIP","public":"LoadBalancer"}}]}]}`
	err = r.checkConversions(lossy, &generatedAPI{Version: "v2-0-0", Conversions: steps})
	var ce *condition.Error
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, ReasonInvalidConversions, ce.Reason)
	assert.ErrorIs(t, err, conversion.ErrLossyRule)
	assert.Equal(t, 2, r.checked.Len())
}
