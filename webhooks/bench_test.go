package webhooks

import (
	"net/http"
	"testing"
)

// BenchmarkMutate measures one defaulting review through the HTTP handler, decoding and
// encoding included.
func BenchmarkMutate(b *testing.B) {
	body := review(b, compositionRequest("CREATE", composition(nil), nil))
	b.ReportAllocs()
	for b.Loop() {
		if code, _ := post(b, MutatePath, body, "application/json"); code != http.StatusOK {
			b.Fatalf("status %d", code)
		}
	}
}
