package webhooks

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	corev1alpha1 "github.com/compositor-dev/compositor/api/core/v1alpha1"
	"github.com/compositor-dev/compositor/api/vocab"
	"github.com/compositor-dev/compositor/policies"
)

// unreachableCharts never answers before its caller gives up.
// It records the deadline it was given.
type unreachableCharts struct{ deadline chan time.Time }

func (u unreachableCharts) Chart(ctx context.Context, _ *corev1alpha1.CompositionDefinition) (*chart.Chart, string, error) {
	deadline, _ := ctx.Deadline()
	u.deadline <- deadline
	<-ctx.Done()
	return nil, "", ctx.Err()
}

// A chart source that does not answer is waited for no longer than the request's
// deadline allows, and the denial names the chart, its digest and what to do.
func TestAdmissionBoundsItsWaitForAChart(t *testing.T) {
	def := &corev1alpha1.CompositionDefinition{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "demo"},
		Spec:       corev1alpha1.CompositionDefinitionSpec{Chart: corev1alpha1.ChartInfo{Repo: "demo-app", Version: "1.0.0"}},
		Status:     corev1alpha1.CompositionDefinitionStatus{Digest: "sha256:abc"},
	}
	charts := unreachableCharts{deadline: make(chan time.Time, 1)}
	check := &policyCheck{charts: charts}
	obj := &unstructured.Unstructured{}
	obj.SetName("one")
	req := &Request{
		Request: admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
			Kind: metav1.GroupVersionKind{Group: vocab.CompositionGroup, Version: "v1-0-0", Kind: "DemoApp"}, Namespace: "team", Name: "one",
		}},
		Object: obj, definitionRead: true, definition: def,
	}
	// The API server would give up after 10 s; the wait is bounded well before.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	requestDeadline, _ := ctx.Deadline()
	err := check.describeComposition(ctx, req, &policies.Write{})
	require.Error(t, err)
	assert.ErrorIs(t, err, ErrChartUnavailable)
	assert.True(t, errors.As(err, new(errUndecidable)))
	assert.Contains(t, err.Error(), "chart demo-app 1.0.0 (digest sha256:abc) of CompositionDefinition team/demo is not available")
	assert.Contains(t, err.Error(), "retry when the chart source is reachable")
	chartDeadline := <-charts.deadline
	assert.False(t, chartDeadline.IsZero(), "the chart source is given a deadline")
	assert.True(t, chartDeadline.Before(requestDeadline.Add(-5*time.Second)), "the chart deadline %s leaves most of the request's time to answer", chartDeadline)
	assert.NoError(t, ctx.Err(), "answered before the request's deadline")
}

func TestChartWaitLeavesTimeToAnswer(t *testing.T) {
	assert.Equal(t, maxChartWait, chartWait(context.Background()))
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	assert.LessOrEqual(t, chartWait(ctx), 500*time.Millisecond)
}
