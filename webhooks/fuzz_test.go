package webhooks

import (
	"encoding/json"
	"net/http"
	"reflect"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kjson "sigs.k8s.io/json"
)

// seedReviews are valid and broken bodies the fuzzers start from.
func seedReviews(f *testing.F) {
	valid := compositionRequest("CREATE", composition(nil), nil)
	update := compositionRequest("UPDATE", composition(map[string]any{"krateo.io/release-name": "b"}), composition(map[string]any{"krateo.io/release-name": "a"}))
	deletion := compositionRequest("DELETE", nil, composition(map[string]any{"krateo.io/paused": "true"}))
	for _, req := range []map[string]any{valid, update, deletion} {
		f.Add(review(f, req))
	}
	f.Add([]byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{}}`))
	f.Add([]byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","kind":{"group":"composition.krateo.io","version":"v1","kind":"X"},"operation":"CREATE","object":null}}`))
	f.Add([]byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","kind":{"group":"composition.krateo.io","version":"v1","kind":"X"},"operation":"UPDATE","object":{"metadata":{"annotations":[]}},"oldObject":{"metadata":7}}}`))
	f.Add([]byte(`[]`))
	f.Add([]byte(``))
}

// fuzzHandler asserts that whatever the body, the handler at path answers with an
// AdmissionReview whose refusals carry a message, and never with a recovered panic.
func fuzzHandler(f *testing.F, path string) {
	seedReviews(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		code, review := post(t, path, body, "application/json")
		resp := review.Response
		if code == http.StatusInternalServerError || (resp.Result != nil && resp.Result.Code == http.StatusInternalServerError) {
			t.Fatalf("internal error for %q: %v", body, resp.Result)
		}
		if !resp.Allowed && (resp.Result == nil || resp.Result.Message == "") {
			t.Fatalf("a refusal without a message for %q", body)
		}
		if resp.Allowed && resp.Patch != nil {
			var patch []map[string]any
			if err := json.Unmarshal(resp.Patch, &patch); err != nil {
				t.Fatalf("the patch is not a JSON patch: %v", err)
			}
			if resp.PatchType == nil || *resp.PatchType != admissionv1.PatchTypeJSONPatch {
				t.Fatalf("a patch without its type")
			}
		}
	})
}

func FuzzMutate(f *testing.F)   { fuzzHandler(f, MutatePath) }
func FuzzValidate(f *testing.F) { fuzzHandler(f, ValidatePath) }

// FuzzReviewDecodesAsBefore: decoding a review and its objects in one pass gives the
// objects, and the errors, that decoding the review and then each object gave. Bodies
// with a key twice are left out: there the one pass merges two objects of the same
// key where the other kept the last (no API server sends such a body).
func FuzzReviewDecodesAsBefore(f *testing.F) {
	seedReviews(f)
	f.Add([]byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","object":{"spec":{"n":1,"f":1.5,"big":12345678901234567890,"l":[1,"a",null,{"x":true}]}},"oldObject":"no"}}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		if strict, err := kjson.UnmarshalStrict(body, &map[string]any{}); err != nil || len(strict) > 0 {
			return
		}
		review, status, err := decodeReview(body)
		plain := &admissionv1.AdmissionReview{}
		plainErr := kjson.UnmarshalCaseSensitivePreserveInts(body, plain)
		if plainErr != nil {
			if err == nil || status != http.StatusBadRequest {
				t.Fatalf("decoded %q, which the plain decoding refuses: %v", body, plainErr)
			}
			return
		}
		if err != nil {
			if plain.Request != nil && plain.GroupVersionKind() == admissionv1.SchemeGroupVersion.WithKind("AdmissionReview") {
				t.Fatalf("refused %q, which the plain decoding reads: %v", body, err)
			}
			return
		}
		for _, o := range []struct {
			name        string
			one, before runtime.RawExtension
		}{{"object", review.Request.Object, plain.Request.Object}, {"oldObject", review.Request.OldObject, plain.Request.OldObject}} {
			got, gotErr := decodeObject(o.name, o.one)
			want, wantErr := decodeObject(o.name, o.before)
			if (gotErr == nil) != (wantErr == nil) || !reflect.DeepEqual(got, want) {
				t.Fatalf("%s of %q: one pass %#v (%v), before %#v (%v)", o.name, body, got, gotErr, want, wantErr)
			}
		}
		review.Request.Object, review.Request.OldObject = plain.Request.Object, plain.Request.OldObject
		if !reflect.DeepEqual(review, plain) {
			t.Fatalf("the review of %q differs: %#v, before %#v", body, review, plain)
		}
	})
}
