package webhooks

import (
	"net/http"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/compositor-dev/compositor/api/vocab"
	"github.com/compositor-dev/compositor/conversion/conversiontest"
)

// FuzzConvert asserts that whatever the body, the converter answers with a
// ConversionReview: a Failure carries a message and no objects, a Success as many
// objects as were sent, and nothing is an internal error.
func FuzzConvert(f *testing.F) {
	fx := fireworks(f)
	h := NewConverter(staticSchemas(fx.schemas))
	f.Add(conversionReviewBody(f, vocab.CompositionGroup+"/v1-1-5", conversiontest.FireworksApp("v2-0-0", map[string]any{"exposure": "public"}, nil)))
	f.Add(conversionReviewBody(f, vocab.CompositionGroup+"/hub", conversiontest.FireworksApp("v1-1-5", map[string]any{"service": map[string]any{"port": 80}},
		map[string]any{vocab.AnnotationConversionStash: `{"/spec/exposure":"public","/spec/service/type":"NodePort"}`})))
	f.Add(conversionReviewBody(f, vocab.CompositionGroup+"/v2-0-0", conversiontest.FireworksApp("v1-1-5", nil, map[string]any{vocab.AnnotationConversionStash: `{"/spec/a~1b/0/c":[1,{"d":null}]}`})))
	f.Add([]byte(`{"apiVersion":"apiextensions.k8s.io/v1","kind":"ConversionReview","request":{"uid":"u","desiredAPIVersion":"composition.krateo.io/hub","objects":[{"apiVersion":"composition.krateo.io/v1-1-5","kind":"FireworksApp","metadata":{"annotations":[]}}]}}`))
	f.Add([]byte(`{"apiVersion":"apiextensions.k8s.io/v1","kind":"ConversionReview","request":{"uid":"u","desiredAPIVersion":"composition.krateo.io/v1-1-5","objects":[{"apiVersion":"composition.krateo.io/hub","kind":"FireworksApp","spec":7,"status":[]}]}}`))
	f.Add([]byte(`{"apiVersion":"apiextensions.k8s.io/v1","kind":"ConversionReview","request":{"uid":"u","objects":[null,1]}}`))
	f.Add([]byte(`[]`))
	f.Add([]byte(``))
	f.Fuzz(func(t *testing.T, body []byte) {
		code, review := postConvert(t, h, http.MethodPost, body, "application/json")
		resp := review.Response
		if code >= http.StatusInternalServerError || resp.Result.Code >= http.StatusInternalServerError {
			t.Fatalf("internal error for %q: %v", body, resp.Result)
		}
		switch resp.Result.Status {
		case metav1.StatusSuccess:
			if code != http.StatusOK {
				t.Fatalf("a Success with status %d", code)
			}
		case metav1.StatusFailure:
			if resp.Result.Message == "" || len(resp.ConvertedObjects) != 0 {
				t.Fatalf("a Failure without a message or with objects for %q", body)
			}
		default:
			t.Fatalf("result status %q for %q", resp.Result.Status, body)
		}
	})
}
