package conversion

import (
	"encoding/json"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/util/validation/field"

	corev1alpha1 "github.com/compositor-dev/compositor/api/core/v1alpha1"
	"github.com/compositor-dev/compositor/api/vocab"
	"github.com/compositor-dev/compositor/conversion/conversiontest"
)

// pinnedApp is a FireworksApp of version, pinned to pin, with spec.
func pinnedApp(version, pin string, spec map[string]any) map[string]any {
	obj := conversiontest.FireworksApp(version, spec, nil)
	obj["metadata"].(map[string]any)["labels"] = map[string]any{vocab.LabelCompositionVersion: pin}
	return obj
}

func originOf(obj map[string]any) (string, bool) {
	return conversiontest.Annotation(obj, vocab.AnnotationConversionOrigin)
}

// The sample chart 2.0.0 declares service.type → exposure (values.conversions.yaml).
func TestDeclaredConversionShowsEachVersionItsOwnValue(t *testing.T) {
	fx := fireworks(t)
	for _, tc := range []struct{ serviceType, exposure string }{
		{"LoadBalancer", "public"}, {"NodePort", "public"}, {"ClusterIP", "internal"},
	} {
		t.Run(tc.serviceType, func(t *testing.T) {
			stored := convertOne(t, fx.schemas, "hub", pinnedApp("v1-1-5", "v1-1-5", map[string]any{"service": map[string]any{"type": tc.serviceType, "port": 80}}))
			v2 := convertOne(t, fx.schemas, "v2-0-0", stored)
			assert.Equal(t, tc.exposure, conversiontest.Spec(v2)["exposure"])
			assert.Equal(t, map[string]any{"port": json.Number("80")}, conversiontest.Spec(v2)["service"])
			origin, kept := originOf(v2)
			assert.Equal(t, tc.serviceType == "NodePort", kept, "only NodePort does not come back by itself: %s", origin)

			// Written back unchanged, the v1-1-5 value is what it was.
			again := convertOne(t, fx.schemas, "hub", v2)
			assert.Equal(t, conversiontest.Spec(stored), conversiontest.Spec(again))
			_, kept = originOf(again)
			assert.False(t, kept)

			// A v2-0-0 client that changes exposure decides service.type.
			conversiontest.Spec(v2)["exposure"] = "internal"
			changed := convertOne(t, fx.schemas, "hub", v2)
			assert.Equal(t, map[string]any{"type": "ClusterIP", "port": json.Number("80")}, conversiontest.Spec(changed)["service"])
			assert.NotContains(t, conversiontest.Spec(changed), "exposure")
		})
	}
}

func TestDeclaredConversionKeepsAV2ValueThroughV1(t *testing.T) {
	fx := fireworks(t)
	stored := convertOne(t, fx.schemas, "hub", pinnedApp("v2-0-0", "v2-0-0", map[string]any{"exposure": "public", "replicaCount": 15}))
	v1 := convertOne(t, fx.schemas, "v1-1-5", stored)
	assert.Equal(t, map[string]any{"type": "LoadBalancer"}, conversiontest.Spec(v1)["service"])
	assert.NotContains(t, conversiontest.Spec(v1), "exposure")

	// A v1-1-5 client changes a field it knows: the object stays a 2.0.0 object.
	conversiontest.Spec(v1)["image"] = map[string]any{"pullPolicy": "Always"}
	back := convertOne(t, fx.schemas, "hub", v1)
	assert.Equal(t, map[string]any{"exposure": "public", "replicaCount": json.Number("15"), "image": map[string]any{"pullPolicy": "Always"}}, conversiontest.Spec(back))
	assert.NotContains(t, back["metadata"], "annotations")
}

// Moving a composition to 2.0.0 (its pin changes in a write through v2-0-0) stores
// the converted values: the release renders the user's intent.
func TestDeclaredConversionAppliesOnAMove(t *testing.T) {
	fx := fireworks(t)
	stored := convertOne(t, fx.schemas, "hub", pinnedApp("v1-1-5", "v1-1-5", map[string]any{"service": map[string]any{"type": "NodePort"}}))
	v2 := convertOne(t, fx.schemas, "v2-0-0", stored)
	v2["metadata"].(map[string]any)["labels"] = map[string]any{vocab.LabelCompositionVersion: "v2-0-0"}
	moved := convertOne(t, fx.schemas, "hub", v2)
	assert.Equal(t, map[string]any{"exposure": "public", "service": map[string]any{}}, conversiontest.Spec(moved))

	// Back to 1.1.5 by label: what 1.1.5 said comes back while exposure is public...
	v1 := convertOne(t, fx.schemas, "v1-1-5", moved)
	v1["metadata"].(map[string]any)["labels"] = map[string]any{vocab.LabelCompositionVersion: "v1-1-5"}
	assert.Equal(t, map[string]any{"service": map[string]any{"type": "NodePort"}}, conversiontest.Spec(convertOne(t, fx.schemas, "hub", v1)))

	// ...and not once a 2.0.0 client changed it: internal reads back as ClusterIP.
	conversiontest.Spec(v2)["exposure"] = "internal"
	moved = convertOne(t, fx.schemas, "hub", v2)
	v1 = convertOne(t, fx.schemas, "v1-1-5", moved)
	assert.Equal(t, map[string]any{"type": "ClusterIP"}, conversiontest.Spec(v1)["service"])
}

// An origin annotation a client forges changes nothing the client's own version shows,
// and nothing it could not write through the pinned version itself.
func TestDeclaredConversionIgnoresAnOriginThatContradictsTheObject(t *testing.T) {
	fx := fireworks(t)
	v2 := pinnedApp("v2-0-0", "v1-1-5", map[string]any{"exposure": "internal"})
	v2["metadata"].(map[string]any)["annotations"] = map[string]any{
		vocab.AnnotationConversionOrigin: `{"v1-1-5":{"values":{"/service/type":"NodePort"}}}`,
	}
	stored := convertOne(t, fx.schemas, "hub", v2)
	assert.Equal(t, map[string]any{"service": map[string]any{"type": "ClusterIP"}}, conversiontest.Spec(stored))
}

// TestDeclaredConversionRoundTripWithAnyPin is TestConversionRoundTrip with objects
// pinned to any served version, so that the declared steps run both ways.
func TestDeclaredConversionRoundTripWithAnyPin(t *testing.T) {
	fx := fireworks(t)
	r := rand.New(rand.NewPCG(*conversionSeed, 1))
	gen := objectGen{valueGen{r: r}}
	served := fx.schemas.Served()
	rt := &roundTrip{}
	reshaped := 0
	for range *conversionIterations * 5 {
		for _, a := range served {
			for _, pin := range served {
				obj := gen.valid(t, fx, a)
				obj["metadata"].(map[string]any)["labels"] = map[string]any{vocab.LabelCompositionVersion: pin}
				for _, b := range served {
					rt.check(t, fx, obj, a, b)
				}
				stored := convertOne(t, fx.schemas, "hub", obj)
				if _, ok := originOf(stored); ok || !equalJSON(conversiontest.Spec(stored), conversiontest.Spec(normalize(t, obj))) {
					reshaped++
				}
			}
		}
	}
	assert.Positive(t, reshaped, "no object was reshaped: the steps never ran")
}

func TestCompileStepsRefusesWithTheField(t *testing.T) {
	raw := func(s string) corev1alpha1.ConversionRule {
		r := corev1alpha1.ConversionRule{}
		require.NoError(t, json.Unmarshal([]byte(s), &r))
		return r
	}
	for name, tc := range map[string]struct {
		steps []corev1alpha1.ConversionStep
		want  string
	}{
		"backwards": {[]corev1alpha1.ConversionStep{{From: "2.0.0", To: "1.0.0", Rules: []corev1alpha1.ConversionRule{{Drop: "a"}}}},
			"spec.conversions[0].to: Invalid value: \"1.0.0\": must be a later chart version than from (2.0.0)"},
		"two kinds": {[]corev1alpha1.ConversionStep{{From: "1.0.0", To: "2.0.0", Rules: []corev1alpha1.ConversionRule{{Drop: "a", Move: "b", To: "c"}}}},
			"spec.conversions[0].rules[0]: Invalid value: \"\": a rule needs exactly one of move, derive and drop"},
		"ambiguous reverse": {[]corev1alpha1.ConversionStep{{From: "1.0.0", To: "2.0.0", Rules: []corev1alpha1.ConversionRule{
			raw(`{"move":"service.type","to":"exposure","map":{"NodePort":"public","LoadBalancer":"public"}}`)}}},
			"map gives public for LoadBalancer and NodePort: say in reverse which one public converts back to"},
		"bad CEL": {[]corev1alpha1.ConversionStep{{From: "1.0.0", To: "2.0.0", Rules: []corev1alpha1.ConversionRule{{Derive: "x", Expression: "self.a +"}}}},
			"spec.conversions[0].rules[0].expression"},
		"empty key": {[]corev1alpha1.ConversionStep{{From: "1.0.0", To: "2.0.0", Rules: []corev1alpha1.ConversionRule{{Move: "a..b", To: "c"}}}},
			"spec.conversions[0].rules[0].move: Invalid value: \"a..b\": a path of the values has no empty keys"},
		"same target": {[]corev1alpha1.ConversionStep{{From: "1.0.0", To: "2.0.0", Rules: []corev1alpha1.ConversionRule{{Move: "a", To: "c"}, {Move: "b", To: "c.d"}}}},
			"rules 0 and 1 both convert c"},
		"overlap": {[]corev1alpha1.ConversionStep{
			{From: "1.0.0", To: "2.0.0", Rules: []corev1alpha1.ConversionRule{{Drop: "a"}}},
			{From: "1.5.0", To: "3.0.0", Rules: []corev1alpha1.ConversionRule{{Drop: "b"}}}},
			"the steps 1.0.0 → 2.0.0 and 1.5.0 → 3.0.0 overlap"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := CompileSteps(tc.steps, field.NewPath("spec", "conversions"))
			require.ErrorIs(t, err, ErrBadRule)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

func TestDeriveRuleWithCEL(t *testing.T) {
	steps, err := CompileSteps([]corev1alpha1.ConversionStep{{From: "1.0.0", To: "2.0.0", Rules: []corev1alpha1.ConversionRule{{
		Derive:     "url",
		Expression: `"http://" + self.host + ":" + string(self.port)`,
		Inverse: map[string]string{
			"host": `self.url.split("/")[2].split(":")[0]`,
			"port": `int(self.url.split(":")[2])`,
		},
	}}}}, field.NewPath("spec"))
	require.NoError(t, err)
	values := map[string]any{"host": "example.test", "port": json.Number("8080"), "other": true}
	steps[0].Forward(values)
	assert.Equal(t, map[string]any{"url": "http://example.test:8080", "other": true}, values)
	steps[0].Backward(values)
	assert.Equal(t, map[string]any{"host": "example.test", "port": int64(8080), "other": true}, values)

	// An expression that fails on a value leaves the value as it was.
	values = map[string]any{"host": "example.test"}
	steps[0].Forward(values)
	assert.Equal(t, map[string]any{"host": "example.test"}, values)
}
