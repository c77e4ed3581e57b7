package webhooks

import (
	"fmt"
	"net/http"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/compositor-dev/compositor/api/vocab"
	"github.com/compositor-dev/compositor/conversion/conversiontest"
)

// BenchmarkConvert500 converts a ConversionReview of 500 compositions through the HTTP
// handler, decoding and encoding included, as the API server sends them when a client
// lists a version: from the hub to v1-1-5, stashing what v1-1-5 lacks, and back; and
// from the hub to v2-0-0 through the declared conversions of chart 2.0.0.
func BenchmarkConvert500(b *testing.B) {
	fx := fireworks(b)
	h := NewConverter(staticSchemas(fx.schemas))
	const n = 500
	stored := make([]map[string]any, n)
	for i := range stored {
		obj := conversiontest.FireworksApp("hub", map[string]any{
			"replicaCount": 1 + i%10,
			"image":        map[string]any{"repository": "registry.example/web", "tag": fmt.Sprintf("1.%d.0", i), "pullPolicy": "IfNotPresent"},
			"service":      map[string]any{"type": "ClusterIP", "port": 8080},
			"exposure":     "public",
			"storage":      map[string]any{"size": "10Gi"},
			"cache":        map[string]any{"enabled": true, "maxMemory": "256Mi"},
		}, map[string]any{"krateo.io/release-name": fmt.Sprintf("app-%d", i), "krateo.io/paused": "false"})
		obj["metadata"].(map[string]any)["name"] = fmt.Sprintf("app-%d", i)
		obj["metadata"].(map[string]any)["labels"] = map[string]any{vocab.LabelCompositionVersion: "v1-1-5"}
		obj["status"] = map[string]any{
			"conditions":       []any{map[string]any{"type": "Ready", "status": "True", "reason": "Available", "lastTransitionTime": "2025-01-02T03:04:05Z"}},
			"helmChartVersion": "2.0.0", "releaseName": fmt.Sprintf("app-%d", i),
		}
		stored[i] = obj
	}
	read := conversionReviewBody(b, vocab.CompositionGroup+"/v1-1-5", stored...)
	resp := fx.convert(b, "v1-1-5", anySlice(stored)...)
	views := make([]map[string]any, n)
	for i, raw := range resp.ConvertedObjects {
		views[i] = decodeJSON(b, raw.Raw)
	}
	write := conversionReviewBody(b, vocab.CompositionGroup+"/hub", views...)
	// Read through v2-0-0, the objects, pinned to v1-1-5, go through chart 2.0.0's
	// declared conversion (service.type → exposure) as well.
	declared := conversionReviewBody(b, vocab.CompositionGroup+"/v2-0-0", stored...)

	for _, bench := range []struct {
		name string
		body []byte
	}{{"hub to v1-1-5", read}, {"v1-1-5 to hub", write}, {"hub to v2-0-0 with declared conversions", declared}} {
		b.Run(bench.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(bench.body)))
			for b.Loop() {
				code, review := postConvert(b, h, http.MethodPost, bench.body, "application/json")
				if code != http.StatusOK || review.Response.Result.Status != metav1.StatusSuccess || len(review.Response.ConvertedObjects) != n {
					b.Fatalf("status %d: %v", code, review.Response.Result)
				}
			}
			b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "objects/s")
		})
	}
}

func anySlice(objs []map[string]any) []any {
	out := make([]any, len(objs))
	for i, o := range objs {
		out[i] = o
	}
	return out
}
