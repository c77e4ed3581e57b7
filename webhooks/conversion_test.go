package webhooks

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/compositor-dev/compositor/generators/crd"
)

const reviewUID = "7f1c2a52-0d1e-4a0b-9a51-3c9e5e0f2d11"

func fireworksApp(version string, spec map[string]any, annotations map[string]any) map[string]any {
	metadata := map[string]any{"name": "demo", "namespace": "default", "uid": "0b8c6d0e-5d7f-4d55-9a4e-2f1d3c4b5a69", "resourceVersion": "42"}
	if annotations != nil {
		metadata["annotations"] = annotations
	}
	return map[string]any{"apiVersion": crd.Group + "/" + version, "kind": "FireworksApp", "metadata": metadata, "spec": spec}
}

func specOf(obj map[string]any) map[string]any {
	spec, _ := obj["spec"].(map[string]any)
	return spec
}

func TestConversionExposureSurvivesV115(t *testing.T) {
	fx := fireworks(t)
	stored := fx.convertOne(t, "hub", fireworksApp("v2-0-0", map[string]any{"exposure": "public", "replicaCount": 2, "service": map[string]any{"port": 8080}}, nil))

	old := fx.convertOne(t, "v1-1-5", stored)
	assert.NotContains(t, specOf(old), "exposure")
	stash, ok := annotation(old)
	require.True(t, ok)
	assert.JSONEq(t, `{"/spec/exposure":"public"}`, stash)

	specOf(old)["replicaCount"] = json.Number("3") // the v1-1-5 client changes a field it knows
	stored = fx.convertOne(t, "hub", old)
	assert.Equal(t, map[string]any{"exposure": "public", "replicaCount": json.Number("3"), "service": map[string]any{"port": json.Number("8080")}}, specOf(stored))
	assert.NotContains(t, stored["metadata"], "annotations", "the stash was the only annotation")

	assert.Equal(t, "public", specOf(fx.convertOne(t, "v2-0-0", stored))["exposure"])
}

func TestConversionServiceTypeSurvivesV200(t *testing.T) {
	fx := fireworks(t)
	stored := fx.convertOne(t, "hub", fireworksApp("v1-1-5", map[string]any{"service": map[string]any{"type": "NodePort", "port": 80}}, map[string]any{"team": "web"}))

	v2 := fx.convertOne(t, "v2-0-0", stored)
	assert.Equal(t, map[string]any{"port": json.Number("80")}, specOf(v2)["service"])
	assert.Equal(t, map[string]any{"team": "web", ConversionDataAnnotation: `{"/spec/service/type":"NodePort"}`}, v2["metadata"].(map[string]any)["annotations"])

	specOf(v2)["exposure"] = "internal"
	stored = fx.convertOne(t, "hub", v2)
	assert.Equal(t, map[string]any{"exposure": "internal", "service": map[string]any{"type": "NodePort", "port": json.Number("80")}}, specOf(stored))
	assert.Equal(t, map[string]any{"team": "web"}, stored["metadata"].(map[string]any)["annotations"], "other annotations stay")

	v1 := fx.convertOne(t, "v1-1-5", stored)
	assert.Equal(t, "NodePort", specOf(v1)["service"].(map[string]any)["type"])
}

func TestConversionServedToServedGoesThroughTheHub(t *testing.T) {
	fx := fireworks(t)
	// Read through v1-1-5 from an object written through v2-0-0, then asked for in v2-0-0.
	v115 := fireworksApp("v1-1-5", map[string]any{"service": map[string]any{"type": "LoadBalancer"}},
		map[string]any{ConversionDataAnnotation: `{"/spec/exposure":"public"}`})
	v2 := fx.convertOne(t, "v2-0-0", v115)
	assert.Equal(t, map[string]any{"exposure": "public", "service": map[string]any{}}, specOf(v2))
	stash, _ := annotation(v2)
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
			got := fx.convertOne(t, "hub", fireworksApp("v1-1-5", tt.spec, map[string]any{ConversionDataAnnotation: tt.stash}))
			assert.Equal(t, tt.want, specOf(got))
			_, ok := annotation(got)
			assert.False(t, ok, "the hub never keeps the stash")
		})
	}
}

func TestConversionKeepsFieldsNoVersionDeclares(t *testing.T) {
	fx := fireworks(t)
	spec := map[string]any{"podLabels": map[string]any{"app": "web"}, "service": map[string]any{"port": 80, "nodePort": 30080}}
	for _, v := range fx.schemas.Served() {
		got := fx.convertOne(t, v, fx.convertOne(t, "hub", fireworksApp("v1-1-5", spec, nil)))
		assert.Equal(t, normalize(t, spec), specOf(got), v)
		_, ok := annotation(got)
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
		ObjectMeta: metav1.ObjectMeta{Name: "closeds." + crd.Group},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: crd.Group,
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
	fx := &fireworksFixture{schemas: schemas, conv: &converter{schemas: staticSchemas(schemas)}}
	hub := map[string]any{
		"apiVersion": crd.Group + "/hub", "kind": "Closed",
		"metadata": map[string]any{"name": "c", "labels": map[string]any{"l": "v"}},
		"spec":     map[string]any{"a": map[string]any{"x": 1, "y/z": "s", "w": true}, "~t": "t", "u": 5},
	}

	v1 := fx.convertOne(t, "v1", hub)
	assert.Equal(t, map[string]any{"a": map[string]any{"x": json.Number("1")}}, specOf(v1))
	stash, _ := annotation(v1)
	assert.Equal(t, `{"/spec/a/w":true,"/spec/a/y~1z":"s","/spec/u":5,"/spec/~0t":"t"}`, stash, "compact, sorted, JSON Pointer keys")
	assert.Equal(t, normalize(t, hub), fx.convertOne(t, "hub", v1))

	v2 := fx.convertOne(t, "v2", hub)
	stash, _ = annotation(v2)
	assert.Equal(t, `{"/spec/a/w":true,"/spec/u":5}`, stash, "only what v2 prunes")
	assert.Equal(t, normalize(t, hub), fx.convertOne(t, "hub", fx.convertOne(t, "v1", v2)))
}

func TestConversionStashTooLarge(t *testing.T) {
	schemas, err := SchemasFromCRD(closedCRD())
	require.NoError(t, err)
	fx := &fireworksFixture{schemas: schemas, conv: &converter{schemas: staticSchemas(schemas)}}
	hub := map[string]any{
		"apiVersion": crd.Group + "/hub", "kind": "Closed", "metadata": map[string]any{"name": "big"},
		"spec": map[string]any{"u": strings.Repeat("x", apivalidation.TotalAnnotationSizeLimitB)},
	}
	resp := fx.convert(t, "v1", hub)
	assert.Equal(t, metav1.StatusFailure, resp.Result.Status)
	assert.Contains(t, resp.Result.Message, "object 0 (big)")
	assert.Empty(t, resp.ConvertedObjects)
	_, err = fx.conv.convertAll(context.Background(), &apiextensionsv1.ConversionRequest{
		UID: reviewUID, DesiredAPIVersion: crd.Group + "/v1", Objects: fx.convert(t, "hub", hub).ConvertedObjects,
	})
	assert.ErrorIs(t, err, ErrConversionDataTooLarge)
}

func TestConversionKeepsOrderAndEchoesUID(t *testing.T) {
	fx := fireworks(t)
	var objs []any
	for _, name := range []string{"c", "a", "b"} {
		o := fireworksApp("v2-0-0", map[string]any{"exposure": "public"}, nil)
		o["metadata"].(map[string]any)["name"] = name
		objs = append(objs, o)
	}
	objs = append(objs, fireworksApp("hub", map[string]any{}, nil), fireworksApp("v1-1-5", map[string]any{}, nil))
	resp := fx.convert(t, "v1-1-6", objs...)
	require.Equal(t, metav1.StatusSuccess, resp.Result.Status, resp.Result.Message)
	assert.Equal(t, types.UID(reviewUID), resp.UID)
	var names []string
	for _, raw := range resp.ConvertedObjects {
		obj := decodeJSON(t, raw.Raw)
		assert.Equal(t, crd.Group+"/v1-1-6", obj["apiVersion"])
		assert.Equal(t, "FireworksApp", obj["kind"])
		names = append(names, obj["metadata"].(map[string]any)["name"].(string))
	}
	assert.Equal(t, []string{"c", "a", "b", "demo", "demo"}, names)

	resp = fx.convert(t, "v1-1-6")
	assert.Equal(t, metav1.StatusSuccess, resp.Result.Status)
	assert.NotNil(t, resp.ConvertedObjects, "an empty list, not null")
}

// A review the converter can read but not convert gets a Failure with the object's
// index, never part of the objects.
func TestConversionRefusesBadRequests(t *testing.T) {
	fx := fireworks(t)
	good := fireworksApp("v1-1-5", map[string]any{}, nil)
	tests := []struct {
		name    string
		desired string
		objects []any
		want    error
		message string
	}{
		{"unknown desired version", "composition.krateo.io/v9", []any{good}, ErrUnknownVersion, `desiredAPIVersion "composition.krateo.io/v9": unknown version of FireworksApp.composition.krateo.io (it has hub, v1-1-5, v1-1-6, v2-0-0)`},
		{"desired version missing", "composition.krateo.io/", []any{good}, ErrUnknownVersion, `desiredAPIVersion "composition.krateo.io/": unknown version: expected composition.krateo.io/<version>`},
		{"desired version without group", "composition.krateo.io", []any{good}, ErrForeignGroup, `desiredAPIVersion "composition.krateo.io": not the group of generated CRDs`},
		{"desired group of someone else", "apps/v1", []any{good}, ErrForeignGroup, `desiredAPIVersion "apps/v1": not the group of generated CRDs: only composition.krateo.io is converted here`},
		{"object not an object", "composition.krateo.io/hub", []any{good, []byte(`[1,2]`)}, ErrMalformedObject, "object 1: malformed object: it is an array"},
		{"object null", "composition.krateo.io/hub", []any{good, []byte(`null`)}, ErrMalformedObject, "object 1: malformed object"},
		{"object of another kind", "composition.krateo.io/hub", []any{good, fireworksApp("v1-1-5", nil, nil), map[string]any{"apiVersion": "composition.krateo.io/v1-1-5", "kind": "OtherApp"}}, ErrWrongKind, "object 2: object of another kind: OtherApp, while object 0 is a FireworksApp"},
		{"object of another group", "composition.krateo.io/hub", []any{map[string]any{"apiVersion": "apps/v1", "kind": "FireworksApp"}}, ErrWrongKind, `object 0: object of another kind: apiVersion "apps/v1" is not in the group composition.krateo.io`},
		{"object without apiVersion", "composition.krateo.io/hub", []any{good, map[string]any{"kind": "FireworksApp"}}, ErrUnknownVersion, `object 1: unknown version: apiVersion ""`},
		{"object without kind", "composition.krateo.io/hub", []any{map[string]any{"apiVersion": "composition.krateo.io/v1-1-5"}}, ErrWrongKind, "object 0: object of another kind: it has no kind"},
		{"object of an unknown version", "composition.krateo.io/hub", []any{good, fireworksApp("v3-0-0", nil, nil)}, ErrUnknownVersion, "object 1: unknown version v3-0-0 of FireworksApp.composition.krateo.io"},
		{"unknown kind", "composition.krateo.io/hub", []any{map[string]any{"apiVersion": "composition.krateo.io/v1", "kind": "Nope"}}, ErrUnknownKind, "schemas of Nope.composition.krateo.io"},
		{"metadata not an object", "composition.krateo.io/hub", []any{good, map[string]any{"apiVersion": "composition.krateo.io/v1-1-5", "kind": "FireworksApp", "metadata": "x"}}, ErrMalformedObject, "object 1 (): malformed object: metadata is a string"},
		{"stash not JSON", "composition.krateo.io/hub", []any{fireworksApp("v1-1-5", nil, map[string]any{ConversionDataAnnotation: "{"})}, ErrBadConversionData, "object 0 (default/demo): unreadable compositor.dev/conversion-data annotation"},
		{"stash outside spec and status", "composition.krateo.io/hub", []any{fireworksApp("v1-1-5", nil, map[string]any{ConversionDataAnnotation: `{"/metadata/name":"x"}`})}, ErrBadConversionData, `"/metadata/name" is not inside spec or status`},
		{"stash with a bad pointer", "composition.krateo.io/hub", []any{fireworksApp("v1-1-5", nil, map[string]any{ConversionDataAnnotation: `{"/spec/a~2":1}`})}, ErrBadConversionData, "~ must be followed by 0 or 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := &apiextensionsv1.ConversionRequest{UID: reviewUID, DesiredAPIVersion: tt.desired}
			for _, o := range tt.objects {
				raw, ok := o.([]byte)
				if !ok {
					raw, _ = json.Marshal(o)
				}
				req.Objects = append(req.Objects, rawObject(raw))
			}
			_, err := fx.conv.convertAll(context.Background(), req)
			assert.ErrorIs(t, err, tt.want)

			resp := fx.conv.review(context.Background(), req)
			assert.Equal(t, types.UID(reviewUID), resp.UID)
			assert.Equal(t, metav1.StatusFailure, resp.Result.Status)
			assert.Equal(t, int32(http.StatusBadRequest), resp.Result.Code)
			assert.Contains(t, resp.Result.Message, tt.message)
			assert.Empty(t, resp.ConvertedObjects, "never a partial list")
		})
	}
}

func TestConversionSourceFailureIsAnInternalError(t *testing.T) {
	unavailable := errors.New("cache not synced")
	c := &converter{schemas: SchemaSourceFunc(func(context.Context, schema.GroupKind, []string) (*Schemas, error) { return nil, unavailable })}
	raw, _ := json.Marshal(fireworksApp("v1-1-5", nil, nil))
	resp := c.review(context.Background(), &apiextensionsv1.ConversionRequest{UID: reviewUID, DesiredAPIVersion: crd.Group + "/hub", Objects: []runtime.RawExtension{rawObject(raw)}})
	assert.Equal(t, metav1.StatusFailure, resp.Result.Status)
	assert.Equal(t, int32(http.StatusInternalServerError), resp.Result.Code)
	assert.Contains(t, resp.Result.Message, "cache not synced")
}

// postConvert sends body to the converter and decodes the ConversionReview it answers.
func postConvert(t testing.TB, h http.Handler, method string, body []byte, contentType string) (int, *apiextensionsv1.ConversionReview) {
	t.Helper()
	r := httptest.NewRequest(method, ConvertPath, bytes.NewReader(body))
	r.Header.Set("Content-Type", contentType)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	review := &apiextensionsv1.ConversionReview{}
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), review), "the answer is not a ConversionReview: %s", w.Body.String())
	require.NotNil(t, review.Response, "the answer has no response: %s", w.Body.String())
	assert.Equal(t, "application/json", w.Header().Get("Content-Type"))
	return w.Code, review
}

func conversionReviewBody(t testing.TB, desired string, objects ...map[string]any) []byte {
	t.Helper()
	raws := []json.RawMessage{}
	for _, o := range objects {
		raw, err := json.Marshal(o)
		require.NoError(t, err)
		raws = append(raws, raw)
	}
	body, err := json.Marshal(map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
		"request": map[string]any{"uid": reviewUID, "desiredAPIVersion": desired, "objects": raws},
	})
	require.NoError(t, err)
	return body
}

func TestConverterHTTP(t *testing.T) {
	fx := fireworks(t)
	h := NewConverter(staticSchemas(fx.schemas))
	good := conversionReviewBody(t, crd.Group+"/v1-1-5", fireworksApp("v2-0-0", map[string]any{"exposure": "public"}, nil))

	code, review := postConvert(t, h, http.MethodPost, good, "application/json; charset=utf-8")
	assert.Equal(t, http.StatusOK, code)
	assert.Equal(t, "apiextensions.k8s.io/v1", review.APIVersion)
	assert.Equal(t, "ConversionReview", review.Kind)
	assert.Equal(t, types.UID(reviewUID), review.Response.UID)
	require.Equal(t, metav1.StatusSuccess, review.Response.Result.Status, review.Response.Result.Message)
	require.Len(t, review.Response.ConvertedObjects, 1)
	obj := decodeJSON(t, review.Response.ConvertedObjects[0].Raw)
	stash, _ := annotation(obj)
	assert.Equal(t, `{"/spec/exposure":"public"}`, stash)

	tests := []struct {
		name        string
		method      string
		body        []byte
		contentType string
		status      int
		message     string
	}{
		{"GET", http.MethodGet, nil, "application/json", http.StatusMethodNotAllowed, "method GET is not allowed"},
		{"not JSON", http.MethodPost, good, "application/yaml", http.StatusUnsupportedMediaType, `content type "application/yaml" is not supported`},
		{"no content type", http.MethodPost, good, "", http.StatusUnsupportedMediaType, "send application/json"},
		{"empty body", http.MethodPost, nil, "application/json", http.StatusBadRequest, "the request body is empty"},
		{"malformed JSON", http.MethodPost, []byte(`{"apiVersion":`), "application/json", http.StatusBadRequest, "the body is not a ConversionReview"},
		{"a JSON array", http.MethodPost, []byte(`[]`), "application/json", http.StatusBadRequest, "the body is not a ConversionReview"},
		{"an AdmissionReview", http.MethodPost, []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u"}}`), "application/json", http.StatusBadRequest, `expected a ConversionReview of apiextensions.k8s.io/v1, got apiVersion "admission.k8s.io/v1" kind "AdmissionReview"`},
		{"an old ConversionReview", http.MethodPost, []byte(`{"apiVersion":"apiextensions.k8s.io/v1beta1","kind":"ConversionReview","request":{"uid":"u"}}`), "application/json", http.StatusBadRequest, `got apiVersion "apiextensions.k8s.io/v1beta1"`},
		{"no request", http.MethodPost, []byte(`{"apiVersion":"apiextensions.k8s.io/v1","kind":"ConversionReview"}`), "application/json", http.StatusBadRequest, "the ConversionReview has no request"},
		{"no uid", http.MethodPost, []byte(`{"apiVersion":"apiextensions.k8s.io/v1","kind":"ConversionReview","request":{"desiredAPIVersion":"composition.krateo.io/hub","objects":[]}}`), "application/json", http.StatusBadRequest, "has no uid"},
		{"over the cap", http.MethodPost, append(append([]byte(`{"apiVersion":"apiextensions.k8s.io/v1","kind":"ConversionReview","request":{"uid":"`), bytes.Repeat([]byte("u"), MaxRequestBytes)...), `"}}`...), "application/json", http.StatusRequestEntityTooLarge, "the request body is"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, review := postConvert(t, h, tt.method, tt.body, tt.contentType)
			assert.Equal(t, tt.status, code)
			assert.Equal(t, metav1.StatusFailure, review.Response.Result.Status)
			assert.Equal(t, int32(tt.status), review.Response.Result.Code)
			assert.Contains(t, review.Response.Result.Message, tt.message)
			assert.Empty(t, review.Response.ConvertedObjects)
		})
	}

	t.Run("an unconvertible review is a Failure with status 200", func(t *testing.T) {
		body := conversionReviewBody(t, crd.Group+"/v1-1-5", fireworksApp("v2-0-0", nil, nil), fireworksApp("v7", nil, nil))
		code, review := postConvert(t, h, http.MethodPost, body, "application/json")
		assert.Equal(t, http.StatusOK, code)
		assert.Equal(t, types.UID(reviewUID), review.Response.UID)
		assert.Equal(t, metav1.StatusFailure, review.Response.Result.Status)
		assert.Contains(t, review.Response.Result.Message, "object 1: unknown version v7")
		assert.Empty(t, review.Response.ConvertedObjects)
	})
}

func TestParsePointer(t *testing.T) {
	tests := map[string][]string{
		"/spec":         {"spec"},
		"/spec/a~1b/~0": {"spec", "a/b", "~"},
		"/spec/~01":     {"spec", "~1"},
		"/spec//x":      {"spec", "", "x"},
	}
	for p, want := range tests {
		got, err := parsePointer(p)
		require.NoError(t, err, p)
		assert.Equal(t, want, got, p)
		assert.Equal(t, p, pointerOf(got), "escaping gives the pointer back")
	}
	for _, bad := range []string{"", "spec", "/spec/~", "/spec/~2"} {
		_, err := parsePointer(bad)
		assert.Error(t, err, bad)
	}
}

// crdLister lists and gets a fixed set of CRDs and counts the calls of each.
type crdLister struct {
	client.Reader
	crds       []apiextensionsv1.CustomResourceDefinition
	calls      int
	gets       int
	getFailure error
}

func (l *crdLister) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	l.gets++
	if l.getFailure != nil {
		return l.getFailure
	}
	for _, c := range l.crds {
		if c.Name == key.Name {
			c.DeepCopyInto(obj.(*apiextensionsv1.CustomResourceDefinition))
			return nil
		}
	}
	return apierrors.NewNotFound(apiextensionsv1.Resource("customresourcedefinitions"), key.Name)
}

func (l *crdLister) List(_ context.Context, list client.ObjectList, _ ...client.ListOption) error {
	l.calls++
	list.(*apiextensionsv1.CustomResourceDefinitionList).Items = l.crds
	return nil
}

func TestCRDSchemas(t *testing.T) {
	fx := fireworks(t)
	ctx := context.Background()
	gk := schema.GroupKind{Group: crd.Group, Kind: "FireworksApp"}
	withRV := func(rv string, versions int) apiextensionsv1.CustomResourceDefinition {
		c := *fx.crd.DeepCopy()
		c.UID, c.ResourceVersion = "uid-1", rv
		c.Spec.Versions = append(c.Spec.Versions[:versions:versions], c.Spec.Versions[len(c.Spec.Versions)-1])
		return c
	}

	t.Run("kept per resourceVersion", func(t *testing.T) {
		cached := &crdLister{crds: []apiextensionsv1.CustomResourceDefinition{withRV("1", 3)}}
		src := NewCRDSchemas(cached, nil)
		first, err := src.Schemas(ctx, gk, []string{"v2-0-0"})
		require.NoError(t, err)
		again, err := src.Schemas(ctx, gk, nil)
		require.NoError(t, err)
		assert.Same(t, first, again)
		assert.Equal(t, 1, cached.calls, "once known, a CRD is read by its name, not found in a list of every CRD")
		assert.Equal(t, 1, cached.gets)

		cached.crds = []apiextensionsv1.CustomResourceDefinition{withRV("2", 2)}
		changed, err := src.Schemas(ctx, gk, nil)
		require.NoError(t, err)
		assert.NotSame(t, first, changed)
		assert.Equal(t, []string{"v1-1-5", "v1-1-6"}, changed.Served())
	})

	t.Run("asks the API server when the cache lags", func(t *testing.T) {
		cached := &crdLister{crds: []apiextensionsv1.CustomResourceDefinition{withRV("1", 2)}}
		live := &crdLister{crds: []apiextensionsv1.CustomResourceDefinition{withRV("2", 3)}}
		src := NewCRDSchemas(cached, live)
		s, err := src.Schemas(ctx, gk, []string{"v1-1-5"})
		require.NoError(t, err)
		assert.Equal(t, 0, live.calls+live.gets, "the cache had every version")
		assert.Equal(t, []string{"v1-1-5", "v1-1-6"}, s.Served())

		s, err = src.Schemas(ctx, gk, []string{"v2-0-0"})
		require.NoError(t, err)
		assert.Equal(t, 1, live.calls+live.gets)
		assert.Equal(t, []string{"v1-1-5", "v1-1-6", "v2-0-0"}, s.Served())

		cached.crds = nil
		_, err = src.Schemas(ctx, gk, nil)
		require.NoError(t, err, "a kind the cache does not have yet comes from the API server")
		live.crds = nil
		_, err = src.Schemas(ctx, gk, nil)
		assert.ErrorIs(t, err, ErrUnknownKind)
	})

	t.Run("a CRD renamed or gone is looked for again", func(t *testing.T) {
		cached := &crdLister{crds: []apiextensionsv1.CustomResourceDefinition{withRV("1", 3)}}
		src := NewCRDSchemas(cached, nil)
		_, err := src.Schemas(ctx, gk, nil)
		require.NoError(t, err)
		renamed := withRV("2", 2)
		renamed.Name = "other." + crd.Group
		cached.crds = []apiextensionsv1.CustomResourceDefinition{renamed}
		s, err := src.Schemas(ctx, gk, nil)
		require.NoError(t, err)
		assert.Equal(t, []string{"v1-1-5", "v1-1-6"}, s.Served())
		assert.Equal(t, 2, cached.calls)

		cached.getFailure = errors.New("cache stopped")
		_, err = src.Schemas(ctx, gk, nil)
		assert.ErrorContains(t, err, "cache stopped", "a failing read is said, not taken for a missing CRD")
	})

	t.Run("a CRD without a storage version", func(t *testing.T) {
		c := withRV("1", 3)
		c.Spec.Versions = c.Spec.Versions[:3]
		_, err := NewCRDSchemas(&crdLister{crds: []apiextensionsv1.CustomResourceDefinition{c}}, nil).Schemas(ctx, gk, nil)
		assert.ErrorIs(t, err, ErrUnconvertibleCRD)
	})
}

// TestPrunerRemembersShapesNotValues: the fields a version prunes are found once per
// shape of object and then read from each object of that shape, values and all; an
// object of another shape, even one key more or a list one item longer, is pruned anew.
func TestPrunerRemembersShapesNotValues(t *testing.T) {
	fx := fireworks(t)
	p := fx.schemas.versions["v1-1-5"].declared
	spec := func(exposure any, ports []any, extra map[string]any) map[string]any {
		s := map[string]any{"replicaCount": 2, "exposure": exposure, "storage": map[string]any{"size": "1Gi"}, "ports": ports}
		for k, v := range extra {
			s[k] = v
		}
		return map[string]any{"spec": s}
	}
	cases := []map[string]any{
		spec("public", []any{map[string]any{"name": "web", "port": 80}}, nil),
		spec("private", []any{map[string]any{"name": "api", "port": 8080}}, nil), // same shape, other values
		spec(map[string]any{"mode": "private"}, []any{map[string]any{"name": "api", "port": 8080}}, nil),
		spec("public", []any{map[string]any{"name": "a"}, map[string]any{"name": "b", "typo": true}}, nil),
		spec("public", []any{map[string]any{"name": "web", "port": 80}}, map[string]any{"unknown": map[string]any{"x": 1}}),
	}
	p.mu.Lock()
	known := len(p.shapes) // the fixture is shared with other tests
	p.mu.Unlock()
	for i, view := range cases {
		before := deepCopyJSON(view)
		got := p.prunedBy(view)
		assert.Equal(t, pruneCopy(view, p.schema), got, "case %d", i)
		assert.Equal(t, before, view, "case %d: the object is left alone", i)
	}
	p.mu.Lock()
	assert.LessOrEqual(t, len(p.shapes)-known, len(cases)-1, "the second case reused the first one's shape")
	p.mu.Unlock()
	got := p.prunedBy(cases[1])
	if assert.NotEmpty(t, got, "v1-1-5 does not declare exposure") {
		assert.Equal(t, "private", got[0].value, "values come from the object, not from the one the shape was learnt on")
	}
}
