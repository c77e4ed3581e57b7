package webhooks

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/compositor-dev/compositor/api/vocab"
	"github.com/compositor-dev/compositor/conversion"
	"github.com/compositor-dev/compositor/conversion/conversiontest"
	"github.com/compositor-dev/compositor/internal/fairshare"
)

func counterValueOf(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	require.NoError(t, c.Write(&m))
	return m.GetCounter().GetValue()
}

// convertFrom sends body to h as the caller at remote, and returns the status and the
// review's result.
func convertFrom(t *testing.T, h http.Handler, remote string, body []byte) (int, metav1.Status) {
	t.Helper()
	r := httptest.NewRequest(http.MethodPost, ConvertPath, bytes.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	r.RemoteAddr = remote
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	review := &apiextensionsv1.ConversionReview{}
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), review), w.Body.String())
	require.NotNil(t, review.Response)
	return w.Code, review.Response.Result
}

// One caller that keeps the converter busy holds its own lane only: another caller's
// review is converted at once, and the busy caller's next one is refused with 503 once
// its wait is over, not queued behind the first.
func TestConverterSharesItselfBetweenCallers(t *testing.T) {
	fx := fireworks(t)
	stuck := make(chan struct{})
	entered := make(chan struct{}, 4)
	source := conversion.SchemaSourceFunc(func(ctx context.Context, gk schema.GroupKind, versions []string) (*conversion.Schemas, error) {
		if gk.Kind == "Slow" {
			entered <- struct{}{}
			select {
			case <-stuck:
			case <-ctx.Done():
			}
			return nil, conversion.ErrUnknownKind
		}
		return staticSchemas(fx.schemas).Schemas(ctx, gk, versions)
	})
	// One slot per caller, two in all: as on two cores.
	c := newConverter(source)
	c.lanes, c.slots, c.wait = fairshare.New(1), make(chan struct{}, 2), 200*time.Millisecond

	slow := conversiontest.FireworksApp("v1-1-5", nil, nil)
	slow["kind"] = "Slow"
	slowBody := conversionReviewBody(t, vocab.CompositionGroup+"/hub", slow)
	good := conversionReviewBody(t, vocab.CompositionGroup+"/v1-1-5", conversiontest.FireworksApp("v2-0-0", nil, nil))

	done := make(chan struct{})
	go func() {
		defer close(done)
		convertFrom(t, c, "10.0.0.66:4000", slowBody)
	}()
	<-entered

	before := counterValueOf(t, conversionBusyTotal)
	code, result := convertFrom(t, c, "10.0.0.66:4001", slowBody)
	assert.Equal(t, http.StatusServiceUnavailable, code, "the busy caller's second review waits its turn, then is refused")
	assert.Contains(t, result.Message, "the converter is busy")
	assert.Equal(t, before+1, counterValueOf(t, conversionBusyTotal))

	code, result = convertFrom(t, c, "10.0.0.1:5000", good)
	assert.Equal(t, http.StatusOK, code)
	assert.Equal(t, metav1.StatusSuccess, result.Status, result.Message)

	close(stuck)
	<-done
	code, _ = convertFrom(t, c, "10.0.0.66:4002", good)
	assert.Equal(t, http.StatusOK, code, "the lane is free again")
}

// A review of a kind the converter does not know is refused after its first object:
// the others are never decoded.
func TestConverterRefusesAnUnknownKindBeforeDecodingTheRest(t *testing.T) {
	fx := fireworks(t)
	var asked [][]string
	source := conversion.SchemaSourceFunc(func(ctx context.Context, gk schema.GroupKind, versions []string) (*conversion.Schemas, error) {
		asked = append(asked, versions)
		return staticSchemas(fx.schemas).Schemas(ctx, gk, versions)
	})
	unknown := conversiontest.FireworksApp("v1-1-5", nil, nil)
	unknown["kind"] = "Unknown"
	objects := []map[string]any{unknown}
	for range 100 {
		// Objects that would not decode: were they decoded, the error would name them.
		objects = append(objects, map[string]any{"apiVersion": 1})
	}
	_, review := postConvert(t, newConverter(source), http.MethodPost, conversionReviewBody(t, vocab.CompositionGroup+"/hub", objects...), "application/json")
	assert.Equal(t, metav1.StatusFailure, review.Response.Result.Status)
	assert.NotContains(t, review.Response.Result.Message, "object 1")
	assert.Equal(t, [][]string{{"hub", "v1-1-5"}}, asked, "one look-up, for object 0")
}
