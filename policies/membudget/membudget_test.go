package membudget_test

import (
	"context"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"time"

	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/compositor-dev/compositor/policies/membudget"
)

func heap() int64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	return int64(s[0].Value.Uint64())
}

// eval runs query as the engine does, tracked.
func eval(t *testing.T, ctx context.Context, query string) error {
	t.Helper()
	prepared, err := rego.New(rego.Query(query)).PrepareForEval(ctx)
	require.NoError(t, err)
	ctx, ended := membudget.Track(ctx)
	_, err = prepared.Eval(ctx)
	return ended(err)
}

// A cross product allocates until the heap passes the budget: the evaluation is
// stopped, with ErrMemory, long before its deadline would have stopped it; and a
// small evaluation after it is not.
func TestAnEvaluationThatGrowsTheHeapPastTheBudgetIsStopped(t *testing.T) {
	runtime.GC()
	membudget.SetBudget(heap() + 64<<20)
	t.Cleanup(func() { membudget.SetBudget(0) })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	err := eval(t, ctx, `x := [[a, b] | some a in numbers.range(1, 100000); some b in numbers.range(1, 100000)]`)
	require.ErrorIs(t, err, membudget.ErrMemory)
	assert.NoError(t, ctx.Err(), "stopped by the guard, not the deadline")
	assert.Contains(t, err.Error(), "heap budget")

	runtime.GC()
	require.NoError(t, eval(t, ctx, `x := count([a | some a in numbers.range(1, 1000)])`), "a small evaluation runs")
}

// Under the budget, an evaluation that runs long is left to its deadline.
func TestALongEvaluationUnderTheBudgetRuns(t *testing.T) {
	runtime.GC()
	membudget.SetBudget(heap() + 1<<30)
	t.Cleanup(func() { membudget.SetBudget(0) })
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	// Loops without keeping what it computes: the heap stays small.
	err := eval(t, ctx, `x := count([1 | some a in numbers.range(1, 3000); some b in numbers.range(1, 3000); a < 0])`)
	require.Error(t, err)
	assert.NotErrorIs(t, err, membudget.ErrMemory)
	assert.ErrorIs(t, ctx.Err(), context.DeadlineExceeded)
}

// Off, Track changes nothing.
func TestOffTheGuardDoesNothing(t *testing.T) {
	membudget.SetBudget(0)
	ctx := context.Background()
	got, ended := membudget.Track(ctx)
	assert.Equal(t, ctx, got)
	assert.Nil(t, ended(nil))
}

// BenchmarkTrack is what the guard adds to each evaluation, on and off.
func BenchmarkTrack(b *testing.B) {
	ctx := context.Background()
	for _, on := range []bool{false, true} {
		name := "off"
		if on {
			name = "on"
			membudget.SetBudget(membudget.DefaultBudget)
		}
		b.Run(name, func(b *testing.B) {
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					_, ended := membudget.Track(ctx)
					_ = ended(nil)
				}
			})
		})
	}
	membudget.SetBudget(0)
}

// The default budget is three quarters of Go's memory limit when one is set (and no
// container limit is lower).
func TestDefaultFollowsTheMemoryLimit(t *testing.T) {
	old := debug.SetMemoryLimit(64 << 20)
	t.Cleanup(func() { debug.SetMemoryLimit(old) })
	assert.LessOrEqual(t, membudget.Default(), int64(48<<20))
	assert.Positive(t, membudget.Default())
}
