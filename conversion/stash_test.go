package conversion

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/compositor-dev/compositor/api/vocab"
	"github.com/compositor-dev/compositor/conversion/conversiontest"
)

func TestConversionExposureSurvivesV115(t *testing.T) {
	fx := fireworks(t)
	stored := convertOne(t, fx.schemas, "hub", conversiontest.FireworksApp("v2-0-0", map[string]any{"exposure": "public", "replicaCount": 2, "service": map[string]any{"port": 8080}}, nil))

	old := convertOne(t, fx.schemas, "v1-1-5", stored)
	assert.NotContains(t, conversiontest.Spec(old), "exposure")
	stash, ok := stashOf(old)
	require.True(t, ok)
	assert.JSONEq(t, `{"/spec/exposure":"public"}`, stash)

	conversiontest.Spec(old)["replicaCount"] = json.Number("3") // the v1-1-5 client changes a field it knows
	stored = convertOne(t, fx.schemas, "hub", old)
	assert.Equal(t, map[string]any{"exposure": "public", "replicaCount": json.Number("3"), "service": map[string]any{"port": json.Number("8080")}}, conversiontest.Spec(stored))
	assert.NotContains(t, stored["metadata"], "annotations", "the stash was the only annotation")

	assert.Equal(t, "public", conversiontest.Spec(convertOne(t, fx.schemas, "v2-0-0", stored))["exposure"])
}

func TestConversionServiceTypeSurvivesV200(t *testing.T) {
	fx := fireworks(t)
	stored := convertOne(t, fx.schemas, "hub", conversiontest.FireworksApp("v1-1-5", map[string]any{"service": map[string]any{"type": "NodePort", "port": 80}}, map[string]any{"team": "web"}))

	v2 := convertOne(t, fx.schemas, "v2-0-0", stored)
	assert.Equal(t, map[string]any{"port": json.Number("80")}, conversiontest.Spec(v2)["service"])
	assert.Equal(t, map[string]any{"team": "web", vocab.AnnotationConversionStash: `{"/spec/service/type":"NodePort"}`}, v2["metadata"].(map[string]any)["annotations"])

	conversiontest.Spec(v2)["exposure"] = "internal"
	stored = convertOne(t, fx.schemas, "hub", v2)
	assert.Equal(t, map[string]any{"exposure": "internal", "service": map[string]any{"type": "NodePort", "port": json.Number("80")}}, conversiontest.Spec(stored))
	assert.Equal(t, map[string]any{"team": "web"}, stored["metadata"].(map[string]any)["annotations"], "other annotations stay")

	v1 := convertOne(t, fx.schemas, "v1-1-5", stored)
	assert.Equal(t, "NodePort", conversiontest.Spec(v1)["service"].(map[string]any)["type"])
}

func TestConversionServedToServedGoesThroughTheHub(t *testing.T) {
	fx := fireworks(t)
	// Read through v1-1-5 from an object written through v2-0-0, then asked for in v2-0-0.
	v115 := conversiontest.FireworksApp("v1-1-5", map[string]any{"service": map[string]any{"type": "LoadBalancer"}},
		map[string]any{vocab.AnnotationConversionStash: `{"/spec/exposure":"public"}`})
	v2 := convertOne(t, fx.schemas, "v2-0-0", v115)
	assert.Equal(t, map[string]any{"exposure": "public", "service": map[string]any{}}, conversiontest.Spec(v2))
	stash, _ := stashOf(v2)
	assert.Equal(t, `{"/spec/service/type":"LoadBalancer"}`, stash)
}

func TestConversionRestoreRules(t *testing.T) {
	fx := fireworks(t)
	tests := []struct {
		name  string
		spec  map[string]any
		stash string
		want  map[string]any
	}{{
		name:  "a value the client set wins over the stash",
		spec:  map[string]any{"exposure": "internal"},
		stash: `{"/spec/exposure":"public"}`,
		want:  map[string]any{"exposure": "internal"},
	}, {
		name:  "a null the client set wins",
		spec:  map[string]any{"exposure": nil},
		stash: `{"/spec/exposure":"public"}`,
		want:  map[string]any{"exposure": nil},
	}, {
		name:  "a container the client removed stays removed",
		spec:  map[string]any{"replicaCount": 1},
		stash: `{"/spec/service/type":"NodePort"}`,
		want:  map[string]any{"replicaCount": json.Number("1")},
	}, {
		name:  "a container the client nulled stays null",
		spec:  map[string]any{"service": nil},
		stash: `{"/spec/service/type":"NodePort"}`,
		want:  map[string]any{"service": nil},
	}, {
		name:  "a stashed null comes back",
		spec:  map[string]any{},
		stash: `{"/spec/storage":null}`,
		want:  map[string]any{"storage": nil},
	}, {
		name:  "values inside lists come back by index while the index exists",
		spec:  map[string]any{"hosts": []any{map[string]any{"name": "a"}}},
		stash: `{"/spec/hosts/0/tls":true,"/spec/hosts/1/tls":false}`,
		want:  map[string]any{"hosts": []any{map[string]any{"name": "a", "tls": true}}},
	}, {
		name:  "exact numbers",
		spec:  map[string]any{},
		stash: `{"/spec/big":123456789012345678901234567890,"/spec/ratio":0.1000000000000000055511151231257827}`,
		want:  map[string]any{"big": json.Number("123456789012345678901234567890"), "ratio": json.Number("0.1000000000000000055511151231257827")},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := convertOne(t, fx.schemas, "hub", conversiontest.FireworksApp("v1-1-5", tt.spec, map[string]any{vocab.AnnotationConversionStash: tt.stash}))
			assert.Equal(t, tt.want, conversiontest.Spec(got))
			_, ok := stashOf(got)
			assert.False(t, ok, "the hub never keeps the stash")
		})
	}
}

func TestConversionKeepsFieldsNoVersionDeclares(t *testing.T) {
	fx := fireworks(t)
	spec := map[string]any{"podLabels": map[string]any{"app": "web"}, "service": map[string]any{"port": 80, "nodePort": 30080}}
	for _, v := range fx.schemas.Served() {
		got := convertOne(t, fx.schemas, v, convertOne(t, fx.schemas, "hub", conversiontest.FireworksApp("v1-1-5", spec, nil)))
		assert.Equal(t, normalize(t, spec), conversiontest.Spec(got), v)
		_, ok := stashOf(got)
		assert.False(t, ok, v)
	}
}

// closedCRD has versions whose schemas prune: v1 knows only spec.a.x, v2 also knows
// spec.a["y/z"] and spec["~t"].
func closedCRD() *apiextensionsv1.CustomResourceDefinition {
	obj := func(props map[string]apiextensionsv1.JSONSchemaProps) apiextensionsv1.JSONSchemaProps {
		return apiextensionsv1.JSONSchemaProps{Type: "object", Properties: props}
	}
	version := func(name string, spec apiextensionsv1.JSONSchemaProps) apiextensionsv1.CustomResourceDefinitionVersion {
		return apiextensionsv1.CustomResourceDefinitionVersion{Name: name, Served: true, Schema: &apiextensionsv1.CustomResourceValidation{
			OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{
				"apiVersion": {Type: "string"}, "kind": {Type: "string"}, "metadata": {Type: "object"}, "spec": spec,
			}},
		}}
	}
	integer, str := apiextensionsv1.JSONSchemaProps{Type: "integer"}, apiextensionsv1.JSONSchemaProps{Type: "string"}
	preserve := true
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "closeds." + vocab.CompositionGroup},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: vocab.CompositionGroup,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Kind: "Closed", Plural: "closeds"},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{
				version("v1", obj(map[string]apiextensionsv1.JSONSchemaProps{"a": obj(map[string]apiextensionsv1.JSONSchemaProps{"x": integer})})),
				version("v2", obj(map[string]apiextensionsv1.JSONSchemaProps{"a": obj(map[string]apiextensionsv1.JSONSchemaProps{"x": integer, "y/z": str}), "~t": str})),
				{Name: "hub", Storage: true, Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{Type: "object", XPreserveUnknownFields: &preserve}}},
			},
		},
	}
}

func TestConversionStashesWhatTheSchemaPrunes(t *testing.T) {
	schemas, err := SchemasFromCRD(closedCRD())
	require.NoError(t, err)
	hub := map[string]any{
		"apiVersion": vocab.CompositionGroup + "/hub", "kind": "Closed",
		"metadata": map[string]any{"name": "c", "labels": map[string]any{"l": "v"}},
		"spec":     map[string]any{"a": map[string]any{"x": 1, "y/z": "s", "w": true}, "~t": "t", "u": 5},
	}

	v1 := convertOne(t, schemas, "v1", hub)
	assert.Equal(t, map[string]any{"a": map[string]any{"x": json.Number("1")}}, conversiontest.Spec(v1))
	stash, _ := stashOf(v1)
	assert.Equal(t, `{"/spec/a/w":true,"/spec/a/y~1z":"s","/spec/u":5,"/spec/~0t":"t"}`, stash, "compact, sorted, JSON Pointer keys")
	assert.Equal(t, normalize(t, hub), convertOne(t, schemas, "hub", v1))

	v2 := convertOne(t, schemas, "v2", hub)
	stash, _ = stashOf(v2)
	assert.Equal(t, `{"/spec/a/w":true,"/spec/u":5}`, stash, "only what v2 prunes")
	assert.Equal(t, normalize(t, hub), convertOne(t, schemas, "hub", convertOne(t, schemas, "v1", v2)))
}

// A version that lacks more than the annotations can hold cannot be converted to.
func TestConversionStashTooLarge(t *testing.T) {
	schemas, err := SchemasFromCRD(closedCRD())
	require.NoError(t, err)
	hub := map[string]any{
		"apiVersion": vocab.CompositionGroup + "/hub", "kind": "Closed", "metadata": map[string]any{"name": "big"},
		"spec": map[string]any{"u": strings.Repeat("x", apivalidation.TotalAnnotationSizeLimitB)},
	}
	_, err = convert(schemas, "v1", hub)
	assert.ErrorIs(t, err, ErrStashTooLarge)
}

func TestConvertRefusesUnknownVersions(t *testing.T) {
	fx := fireworks(t)
	for _, versions := range [][2]string{{"v9", "hub"}, {"hub", "v9"}, {"v1-1-5", ""}} {
		obj := conversiontest.FireworksApp(versions[0], map[string]any{}, nil)
		err := fx.schemas.Convert(obj, versions[0], versions[1])
		assert.ErrorIs(t, err, ErrUnknownVersion, "%s → %s", versions[0], versions[1])
		assert.ErrorContains(t, err, "of FireworksApp.composition.krateo.io (it has hub, v1-1-5, v1-1-6, v2-0-0)")
		assert.Equal(t, vocab.CompositionGroup+"/"+versions[0], obj["apiVersion"], "the object is left alone")
	}
}

// AsStored gives what a client of a version reads back after writing obj: the stash
// merged in where the client set nothing, and moved out again for that version.
func TestAsStored(t *testing.T) {
	fx := fireworks(t)
	obj := conversiontest.FireworksApp("v1-1-5", map[string]any{"replicaCount": json.Number("1")}, map[string]any{
		vocab.AnnotationConversionStash: `{"/spec/image":{"repository":"evil.io/miner"},"/spec/exposure":"public","/spec/replicaCount":7}`})
	before := deepCopyJSON(obj)
	stored, err := fx.schemas.AsStored(obj, "v1-1-5")
	require.NoError(t, err)
	assert.Equal(t, map[string]any{"replicaCount": json.Number("1"), "image": map[string]any{"repository": "evil.io/miner"}}, conversiontest.Spec(stored))
	stash, _ := stashOf(stored)
	assert.Equal(t, `{"/spec/exposure":"public"}`, stash)
	assert.Equal(t, before, obj, "obj is left alone")

	_, err = fx.schemas.AsStored(obj, "v9")
	assert.ErrorIs(t, err, ErrUnknownVersion)
}

func TestHasStashAndParseStash(t *testing.T) {
	for _, tt := range []struct {
		obj  map[string]any
		want bool
		err  error
	}{
		{map[string]any{}, false, nil},
		{map[string]any{"metadata": nil}, false, nil},
		{map[string]any{"metadata": map[string]any{"annotations": map[string]any{"a": "b"}}}, false, nil},
		{map[string]any{"metadata": map[string]any{"annotations": map[string]any{vocab.AnnotationConversionStash: "{}"}}}, true, nil},
		{map[string]any{"metadata": "x"}, false, ErrMalformedObject},
		{map[string]any{"metadata": map[string]any{"annotations": []any{}}}, false, ErrMalformedObject},
	} {
		got, err := HasStash(tt.obj)
		assert.ErrorIs(t, err, tt.err, "%v", tt.obj)
		assert.Equal(t, tt.want, got, "%v", tt.obj)
	}

	stash, err := ParseStash(`{"/spec/big":123456789012345678901234567890,"/spec/a":{"b":[null]}}`)
	require.NoError(t, err)
	assert.Equal(t, map[string]any{"/spec/big": json.Number("123456789012345678901234567890"), "/spec/a": map[string]any{"b": []any{nil}}}, stash)
	for _, bad := range []string{"", "{", "[]", `{} {}`, `"x"`} {
		_, err := ParseStash(bad)
		assert.ErrorIs(t, err, ErrBadStash, "%q", bad)
	}
}
