package webhooks

import (
	"encoding/json"
	"net/http"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
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
