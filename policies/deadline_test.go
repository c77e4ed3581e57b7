package policies

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	chartcommon "helm.sh/helm/v4/pkg/chart/common"
	chart "helm.sh/helm/v4/pkg/chart/v2"

	"github.com/compositor-dev/compositor/api/policy/v1alpha1"
)

// slowChart renders n×n loop iterations: a template whose cost a composition chooses.
func slowChart() *chart.Chart {
	return &chart.Chart{
		Metadata: &chart.Metadata{APIVersion: chart.APIVersionV2, Name: "slow", Version: "0.1.0"},
		Values:   map[string]any{"n": 1},
		Schema:   []byte(`{"type":"object","properties":{"n":{"type":"integer","maximum":100000}}}`),
		Templates: []*chartcommon.File{{Name: "templates/cm.yaml", Data: []byte(`apiVersion: v1
kind: ConfigMap
metadata: {name: slow}
data:
  x: "{{ range until (int .Values.n) }}{{ range until (int $.Values.n) }}{{ end }}{{ end }}"
`)}},
	}
}

// Issue 12, item 5: a runaway template is a clear denial at the deadline, values the
// schema refuses are never rendered, and other requests are decided meanwhile.
func TestRenderingHasADeadline(t *testing.T) {
	ctx := context.Background()
	e := newTestEngine(t, Options{Timeout: 100 * time.Millisecond})
	require.NoError(t, e.Set(ctx, Policy{Name: "ha", Rego: haPolicy, Target: v1alpha1.TargetRendered}))
	judge := NewJudge(JudgeOptions{Engine: e})

	slow := compositionRequest(map[string]any{"n": 3000})
	slow.Chart = slowChart()
	var wg sync.WaitGroup
	wg.Add(1)
	var slowDecision Decision
	var slowErr error
	go func() {
		defer wg.Done()
		slowDecision, slowErr = judge.Decide(ctx, slow)
	}()

	// Decided while the slow render runs: a cheap composition of the same chart.
	quick := compositionRequest(map[string]any{"n": 2})
	quick.Chart = slowChart()
	d, err := judge.Decide(ctx, quick)
	require.NoError(t, err)
	assert.False(t, d.Denied(), "%v", d.Violations)

	wg.Wait()
	require.NoError(t, slowErr)
	require.True(t, slowDecision.Denied())
	assert.Contains(t, FormatLines(slowDecision.Violations)[0], "rendering chart slow was stopped at the deadline")

	// Values the schema refuses are refused for that alone, without rendering.
	refused := compositionRequest(map[string]any{"n": 1000000})
	refused.Chart = slowChart()
	d, err = judge.Decide(ctx, refused)
	require.NoError(t, err)
	assert.Equal(t, []string{"spec.n: must be <= 100000 (values.schema.json)"}, FormatLines(d.Violations))
}
