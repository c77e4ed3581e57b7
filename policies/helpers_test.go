package policies

import (
	"context"

	chartcommon "helm.sh/helm/v4/pkg/chart/common"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func gvk(group, version, kind string) metav1.GroupVersionKind {
	return metav1.GroupVersionKind{Group: group, Version: version, Kind: kind}
}

func withData(f *chartcommon.File, data string) *chartcommon.File {
	return &chartcommon.File{Name: f.Name, Data: []byte(data)}
}

// Evaluate is what Judge.Policies asks of the engine, rendering in-process: the
// package's tests of the engine itself ask it directly.
func (e *Engine) Evaluate(ctx context.Context, r *Request) []Violation {
	return e.evaluate(ctx, r, nil)
}

// noSchemas checks no values: for tests of the policies alone.
type noSchemas struct{}

func (noSchemas) ValidateValues(context.Context, *chart.Chart, string, map[string]any) ([]Violation, error) {
	return nil, nil
}
