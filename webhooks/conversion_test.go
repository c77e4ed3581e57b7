package webhooks

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/compositor-dev/compositor/api/vocab"
	"github.com/compositor-dev/compositor/conversion"
	"github.com/compositor-dev/compositor/conversion/conversiontest"
	"github.com/compositor-dev/compositor/generators/crd"
)

const reviewUID = "7f1c2a52-0d1e-4a0b-9a51-3c9e5e0f2d11"

// fireworksFixture is the schemas of the fireworks-app CRD in every sample chart
// version and a converter that knows them.
type fireworksFixture struct {
	schemas *conversion.Schemas
	conv    *converter
}

var fireworksFixtureOnce = sync.OnceValues(func() (*fireworksFixture, error) {
	c, err := conversiontest.FireworksCRD(crd.ConversionWebhook{URL: "https://127.0.0.1:9443" + ConvertPath})
	if err != nil {
		return nil, err
	}
	schemas, err := conversion.SchemasFromCRD(c)
	if err != nil {
		return nil, err
	}
	return &fireworksFixture{schemas: schemas, conv: &converter{schemas: staticSchemas(schemas)}}, nil
})

func fireworks(t testing.TB) *fireworksFixture {
	t.Helper()
	fx, err := fireworksFixtureOnce()
	require.NoError(t, err)
	return fx
}

// staticSchemas is a SchemaSource that knows one CRD.
func staticSchemas(s *conversion.Schemas) conversion.SchemaSource {
	return conversion.SchemaSourceFunc(func(_ context.Context, gk schema.GroupKind, _ []string) (*conversion.Schemas, error) {
		if gk != s.GroupKind() {
			return nil, fmt.Errorf("%w: %s", conversion.ErrUnknownKind, gk)
		}
		return s, nil
	})
}

// convert runs one ConversionReview request of objs to version through the converter
// and returns the response.
func (fx *fireworksFixture) convert(t testing.TB, version string, objs ...any) *apiextensionsv1.ConversionResponse {
	t.Helper()
	req := &apiextensionsv1.ConversionRequest{UID: reviewUID, DesiredAPIVersion: vocab.CompositionGroup + "/" + version}
	for _, o := range objs {
		raw, ok := o.([]byte)
		if !ok {
			var err error
			raw, err = json.Marshal(o)
			require.NoError(t, err)
		}
		req.Objects = append(req.Objects, rawObject(raw))
	}
	return fx.conv.review(context.Background(), req)
}

// convertOne converts one object and decodes the result; the conversion must succeed.
func (fx *fireworksFixture) convertOne(t testing.TB, version string, obj any) map[string]any {
	t.Helper()
	resp := fx.convert(t, version, obj)
	require.Equal(t, "Success", resp.Result.Status, resp.Result.Message)
	require.Len(t, resp.ConvertedObjects, 1)
	return decodeJSON(t, resp.ConvertedObjects[0].Raw)
}

// decodeJSON decodes like the converter does, so values compare exactly.
func decodeJSON(t testing.TB, raw []byte) map[string]any {
	t.Helper()
	obj, err := conversion.Decode(raw)
	require.NoError(t, err)
	return obj
}

func rawObject(raw []byte) runtime.RawExtension { return runtime.RawExtension{Raw: raw} }

// stashOf is the conversion stash of obj, if it has one.
func stashOf(obj map[string]any) (string, bool) {
	return conversiontest.Annotation(obj, vocab.AnnotationConversionStash)
}

// A conversion the engine refuses fails the whole review, naming the object.
func TestConversionStashTooLarge(t *testing.T) {
	fx := fireworks(t)
	hub := conversiontest.FireworksApp("hub", map[string]any{"exposure": strings.Repeat("x", apivalidation.TotalAnnotationSizeLimitB)}, nil)
	resp := fx.convert(t, "v1-1-5", hub)
	assert.Equal(t, metav1.StatusFailure, resp.Result.Status)
	assert.Contains(t, resp.Result.Message, "object 0 (default/demo)")
	assert.Empty(t, resp.ConvertedObjects)
	_, err := fx.conv.convertAll(context.Background(), &apiextensionsv1.ConversionRequest{
		UID: reviewUID, DesiredAPIVersion: vocab.CompositionGroup + "/v1-1-5", Objects: fx.convert(t, "hub", hub).ConvertedObjects,
	})
	assert.ErrorIs(t, err, conversion.ErrStashTooLarge)
}

func TestConversionKeepsOrderAndEchoesUID(t *testing.T) {
	fx := fireworks(t)
	var objs []any
	for _, name := range []string{"c", "a", "b"} {
		o := conversiontest.FireworksApp("v2-0-0", map[string]any{"exposure": "public"}, nil)
		o["metadata"].(map[string]any)["name"] = name
		objs = append(objs, o)
	}
	objs = append(objs, conversiontest.FireworksApp("hub", map[string]any{}, nil), conversiontest.FireworksApp("v1-1-5", map[string]any{}, nil))
	resp := fx.convert(t, "v1-1-6", objs...)
	require.Equal(t, metav1.StatusSuccess, resp.Result.Status, resp.Result.Message)
	assert.Equal(t, types.UID(reviewUID), resp.UID)
	var names []string
	for _, raw := range resp.ConvertedObjects {
		obj := decodeJSON(t, raw.Raw)
		assert.Equal(t, vocab.CompositionGroup+"/v1-1-6", obj["apiVersion"])
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
	good := conversiontest.FireworksApp("v1-1-5", map[string]any{}, nil)
	tests := []struct {
		name    string
		desired string
		objects []any
		want    error
		message string
	}{
		{"unknown desired version", "composition.krateo.io/v9", []any{good}, conversion.ErrUnknownVersion, `desiredAPIVersion "composition.krateo.io/v9": unknown version of FireworksApp.composition.krateo.io (it has hub, v1-1-5, v1-1-6, v2-0-0)`},
		{"desired version missing", "composition.krateo.io/", []any{good}, conversion.ErrUnknownVersion, `desiredAPIVersion "composition.krateo.io/": unknown version: expected composition.krateo.io/<version>`},
		{"desired version without group", "composition.krateo.io", []any{good}, ErrForeignGroup, `desiredAPIVersion "composition.krateo.io": not the group of generated CRDs`},
		{"desired group of someone else", "apps/v1", []any{good}, ErrForeignGroup, `desiredAPIVersion "apps/v1": not the group of generated CRDs: only composition.krateo.io is converted here`},
		{"object not an object", "composition.krateo.io/hub", []any{good, []byte(`[1,2]`)}, conversion.ErrMalformedObject, "object 1: malformed object: it is an array"},
		{"object null", "composition.krateo.io/hub", []any{good, []byte(`null`)}, conversion.ErrMalformedObject, "object 1: malformed object"},
		{"object of another kind", "composition.krateo.io/hub", []any{good, conversiontest.FireworksApp("v1-1-5", nil, nil), map[string]any{"apiVersion": "composition.krateo.io/v1-1-5", "kind": "OtherApp"}}, ErrWrongKind, "object 2: object of another kind: OtherApp, while object 0 is a FireworksApp"},
		{"object of another group", "composition.krateo.io/hub", []any{map[string]any{"apiVersion": "apps/v1", "kind": "FireworksApp"}}, ErrWrongKind, `object 0: object of another kind: apiVersion "apps/v1" is not in the group composition.krateo.io`},
		{"object without apiVersion", "composition.krateo.io/hub", []any{good, map[string]any{"kind": "FireworksApp"}}, conversion.ErrUnknownVersion, `object 1: unknown version: apiVersion ""`},
		{"object without kind", "composition.krateo.io/hub", []any{map[string]any{"apiVersion": "composition.krateo.io/v1-1-5"}}, ErrWrongKind, "object 0: object of another kind: it has no kind"},
		{"object of an unknown version", "composition.krateo.io/hub", []any{good, conversiontest.FireworksApp("v3-0-0", nil, nil)}, conversion.ErrUnknownVersion, "object 1: unknown version v3-0-0 of FireworksApp.composition.krateo.io"},
		{"unknown kind", "composition.krateo.io/hub", []any{map[string]any{"apiVersion": "composition.krateo.io/v1", "kind": "Nope"}}, conversion.ErrUnknownKind, "schemas of Nope.composition.krateo.io"},
		{"metadata not an object", "composition.krateo.io/hub", []any{good, map[string]any{"apiVersion": "composition.krateo.io/v1-1-5", "kind": "FireworksApp", "metadata": "x"}}, conversion.ErrMalformedObject, "object 1 (): malformed object: metadata is a string"},
		{"stash not JSON", "composition.krateo.io/hub", []any{conversiontest.FireworksApp("v1-1-5", nil, map[string]any{vocab.AnnotationConversionStash: "{"})}, conversion.ErrBadStash, "object 0 (default/demo): unreadable compositor.dev/conversion-data annotation"},
		{"stash outside spec and status", "composition.krateo.io/hub", []any{conversiontest.FireworksApp("v1-1-5", nil, map[string]any{vocab.AnnotationConversionStash: `{"/metadata/name":"x"}`})}, conversion.ErrBadStash, `"/metadata/name" is not inside spec or status`},
		{"stash with a bad pointer", "composition.krateo.io/hub", []any{conversiontest.FireworksApp("v1-1-5", nil, map[string]any{vocab.AnnotationConversionStash: `{"/spec/a~2":1}`})}, conversion.ErrBadStash, "~ must be followed by 0 or 1"},
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
	c := &converter{schemas: conversion.SchemaSourceFunc(func(context.Context, schema.GroupKind, []string) (*conversion.Schemas, error) {
		return nil, unavailable
	})}
	raw, _ := json.Marshal(conversiontest.FireworksApp("v1-1-5", nil, nil))
	resp := c.review(context.Background(), &apiextensionsv1.ConversionRequest{UID: reviewUID, DesiredAPIVersion: vocab.CompositionGroup + "/hub", Objects: []runtime.RawExtension{rawObject(raw)}})
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
	good := conversionReviewBody(t, vocab.CompositionGroup+"/v1-1-5", conversiontest.FireworksApp("v2-0-0", map[string]any{"exposure": "public"}, nil))

	code, review := postConvert(t, h, http.MethodPost, good, "application/json; charset=utf-8")
	assert.Equal(t, http.StatusOK, code)
	assert.Equal(t, "apiextensions.k8s.io/v1", review.APIVersion)
	assert.Equal(t, "ConversionReview", review.Kind)
	assert.Equal(t, types.UID(reviewUID), review.Response.UID)
	require.Equal(t, metav1.StatusSuccess, review.Response.Result.Status, review.Response.Result.Message)
	require.Len(t, review.Response.ConvertedObjects, 1)
	obj := decodeJSON(t, review.Response.ConvertedObjects[0].Raw)
	stash, _ := stashOf(obj)
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
		body := conversionReviewBody(t, vocab.CompositionGroup+"/v1-1-5", conversiontest.FireworksApp("v2-0-0", nil, nil), conversiontest.FireworksApp("v7", nil, nil))
		code, review := postConvert(t, h, http.MethodPost, body, "application/json")
		assert.Equal(t, http.StatusOK, code)
		assert.Equal(t, types.UID(reviewUID), review.Response.UID)
		assert.Equal(t, metav1.StatusFailure, review.Response.Result.Status)
		assert.Contains(t, review.Response.Result.Message, "object 1: unknown version v7")
		assert.Empty(t, review.Response.ConvertedObjects)
	})
}
