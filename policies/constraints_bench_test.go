package policies

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"
)

// BenchmarkConstraintsLibrary times one composition's constraint review with the 50
// templates of test/bench/constraints, on objects already rendered (the evaluation
// alone, as at the install gate):
//
//	go test ./policies/ -run '^$' -bench ConstraintsLibrary -benchmem
func BenchmarkConstraintsLibrary(b *testing.B) {
	dir, err := LoadDir(filepath.Join("..", "test", "bench", "constraints"))
	require.NoError(b, err)
	require.NoError(b, dir.Err())
	e := newTestEngine(b, Options{})
	e.SetConstraints(OriginObject, dir.Constraints)
	data, err := os.ReadFile(filepath.Join("..", "samples", "charts", "fireworks-app", "examples", "1.1.5", "values-full.yaml"))
	require.NoError(b, err)
	var spec map[string]any
	require.NoError(b, yaml.Unmarshal(data, &spec))
	r := compositionRequest(spec)
	r.Namespace = "bench"
	r.Object["metadata"].(map[string]any)["namespace"] = "bench"
	r.Object["metadata"].(map[string]any)["labels"] = map[string]any{"team": "a"}
	r.Chart = loadChart(b, "1.1.5")
	r.Rendered, err = Render(r.Chart, spec, RenderOptions{ReleaseName: "x", Namespace: "bench"})
	require.NoError(b, err)
	b.Logf("%d constraints; violations: %v", len(dir.Constraints.Constraints()), messages(e.Evaluate(context.Background(), r)))
	b.ResetTimer()
	b.ReportAllocs()
	for b.Loop() {
		e.Evaluate(context.Background(), r)
	}
}
