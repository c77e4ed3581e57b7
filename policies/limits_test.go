package policies

import (
	"context"
	"encoding/json"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// nested returns {key: {key: ... leaf}} levels deep.
func nested(key string, levels int, leaf any) any {
	v := leaf
	for range levels {
		v = map[string]any{key: v}
	}
	return v
}

func object(spec any) map[string]any {
	return map[string]any{"apiVersion": "composition.krateo.io/v1", "kind": "X", "metadata": map[string]any{"name": "x"}, "spec": spec}
}

func TestCheckObjectDepthNamesFieldAndLimit(t *testing.T) {
	l := DefaultLimits()
	errs := l.CheckObject(object(nested("nest", 9000, "x")))
	require.Len(t, errs, 1)
	assert.Equal(t, LimitDepth, errs[0].Reason)
	assert.Equal(t, 9001, errs[0].Value, "spec and 9000 levels of nest")
	assert.Equal(t, "spec.nest.nest.…(9001 levels): nested 9001 levels deep, more than the limit of 64 (--max-value-depth)", errs[0].Error())

	// At the limit: admitted; one more level: refused.
	assert.Empty(t, l.CheckObject(object(nested("a", 63, "x"))))
	errs = l.CheckObject(object(nested("a", 64, "x")))
	require.Len(t, errs, 1)
	assert.Equal(t, 65, errs[0].Value)

	// Arrays count as levels too, and metadata is measured like spec.
	obj := object(map[string]any{})
	obj["metadata"] = map[string]any{"annotations": map[string]any{"a": "b"}, "x": nested("y", 3, []any{[]any{[]any{1}}})}
	errs = Limits{MaxDepth: 5}.CheckObject(obj)
	require.Len(t, errs, 1)
	assert.Equal(t, "metadata.x.y.…(8 levels): nested 8 levels deep, more than the limit of 5 (--max-value-depth)", errs[0].Error())
}

func TestCheckObjectKeys(t *testing.T) {
	list := make([]any, 20_000)
	for i := range list {
		list[i] = i
	}
	errs := DefaultLimits().CheckObject(object(map[string]any{"list": list}))
	require.Len(t, errs, 1)
	assert.Equal(t, LimitKeys, errs[0].Reason)
	assert.Greater(t, errs[0].Value, 20_000)
	assert.Contains(t, errs[0].Error(), "spec.list[")
	assert.Contains(t, errs[0].Error(), "more than the limit of 10000 (--max-value-keys)")

	m := map[string]any{}
	for i := range 9_000 {
		m[strings.Repeat("k", 1+i%7)+string(rune('a'+i%26))+json.Number(rune(i)).String()] = i
	}
	assert.Empty(t, DefaultLimits().CheckObject(object(m)), "9,000 keys are within the default")
}

func TestCheckObjectStrings(t *testing.T) {
	big := strings.Repeat("x", DefaultMaxStringBytes+1)
	errs := DefaultLimits().CheckObject(object(map[string]any{"a": []any{"ok", big}}))
	require.Len(t, errs, 1)
	assert.Equal(t, "spec.a[1]: a string of 262145 bytes, more than the limit of 262144 (--max-string-bytes)", errs[0].Error())

	errs = DefaultLimits().CheckObject(object(map[string]any{big: 1}))
	require.Len(t, errs, 1)
	assert.Contains(t, errs[0].Error(), "(a key): a string of 262145 bytes")

	assert.Empty(t, DefaultLimits().CheckObject(object(map[string]any{"a": strings.Repeat("x", DefaultMaxStringBytes)})))
}

func TestCheckObjectSkipsStatusAndZeroLimits(t *testing.T) {
	obj := object(map[string]any{})
	obj["status"] = nested("deep", 500, "x")
	assert.Empty(t, DefaultLimits().CheckObject(obj), "status is Compositor's")
	obj = object(nested("a", 60, "x"))
	obj["metadata"].(map[string]any)["managedFields"] = []any{map[string]any{"fieldsV1": nested("f:a", 60, map[string]any{})}}
	assert.Empty(t, DefaultLimits().CheckObject(obj), "managedFields are the API server's, and mirror spec")
	obj["managedFields"] = nested("a", 100, "x")
	assert.Len(t, DefaultLimits().CheckObject(obj), 1, "only metadata's managedFields are skipped")
	assert.Empty(t, Limits{}.CheckObject(object(nested("deep", 500, strings.Repeat("x", 1<<20)))), "a zero limit bounds nothing")
}

func TestCheckObjectReportsEveryBound(t *testing.T) {
	errs := Limits{MaxDepth: 3, MaxKeys: 4, MaxStringBytes: 2}.CheckObject(object(nested("a", 8, "long")))
	var reasons []string
	for _, e := range errs {
		reasons = append(reasons, e.Reason)
	}
	assert.Equal(t, []string{LimitDepth, LimitKeys, LimitString}, reasons)
}

func TestLimitsValidate(t *testing.T) {
	require.NoError(t, DefaultLimits().Validate())
	err := Limits{MaxDepth: 0, MaxKeys: -1, MaxStringBytes: 1, MaxRenderedBytes: 1}.Validate()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "--max-value-depth must be at least 1, got 0")
	assert.Contains(t, err.Error(), "--max-value-keys must be at least 1, got -1")
}

func TestCheckRendered(t *testing.T) {
	l := Limits{MaxRenderedBytes: 10}
	require.NoError(t, l.CheckRendered("c", map[string]string{"a": "12345", "b": "12345"}))
	err := l.CheckRendered("c", map[string]string{"a": "12345", "b": "123456"})
	require.Error(t, err)
	assert.Equal(t, "chart c: the chart renders to more than 10 bytes, the limit (--max-rendered-bytes)", err.Error())
}

// FuzzCheckObject: any JSON object is measured without a panic, and either passes or is
// refused with messages that name a bound and its flag.
func FuzzCheckObject(f *testing.F) {
	f.Add([]byte(`{"spec":{"a":[1,{"b":"c"}]}}`), 3, 5, 4)
	f.Add([]byte(`{"spec":{"a":{"a":{"a":{"a":{}}}}}}`), 2, 100, 100)
	f.Add([]byte(`{"metadata":{"annotations":{"k":"vvvvvvvvvv"}},"status":[[[[1]]]]}`), 1, 1, 1)
	f.Add([]byte(`{"spec":[[[[[[[[[[[]]]]]]]]]]]}`), 0, 0, 0)
	f.Fuzz(func(t *testing.T, raw []byte, depth, keys, str int) {
		var obj map[string]any
		if json.Unmarshal(raw, &obj) != nil {
			return
		}
		l := Limits{MaxDepth: depth % 100, MaxKeys: keys % 1000, MaxStringBytes: str % 1000}
		for _, e := range l.CheckObject(obj) {
			msg := e.Error()
			if e.Field == "" || !strings.Contains(msg, "more than") || !strings.Contains(msg, "(--") {
				t.Fatalf("refusal without field, limit or flag: %q", msg)
			}
			switch e.Reason {
			case LimitDepth:
				if e.Value <= l.MaxDepth || l.MaxDepth <= 0 {
					t.Fatalf("depth %d refused under limit %d", e.Value, l.MaxDepth)
				}
			case LimitKeys:
				if e.Value <= l.MaxKeys || l.MaxKeys <= 0 {
					t.Fatalf("keys %d refused under limit %d", e.Value, l.MaxKeys)
				}
			case LimitString:
				if e.Value <= l.MaxStringBytes || l.MaxStringBytes <= 0 {
					t.Fatalf("string %d refused under limit %d", e.Value, l.MaxStringBytes)
				}
			default:
				t.Fatalf("unknown reason %q", e.Reason)
			}
		}
	})
}

const rangePolicy = `package huge

deny contains "never" if {
	count(numbers.range(1, input.review.object.spec.n)) < 0
}
`

// TestRangeBoundedBeforeMemory: a policy that asks numbers.range for 1e11 elements (the
// number comes from input, so no check at compile time could catch it) is stopped before
// it builds any, denied with a message naming the limit, and costs almost no memory.
// Without the bound it allocates until the deadline (hundreds of MB; logged).
func TestRangeBoundedBeforeMemory(t *testing.T) {
	ctx := context.Background()
	e := newTestEngine(t, Options{Timeout: 2 * time.Second})
	require.NoError(t, e.Set(ctx, Policy{Name: "huge", Rego: rangePolicy}))

	allocated := func(f func()) (total, peakHeap uint64) {
		runtime.GC()
		var before runtime.MemStats
		runtime.ReadMemStats(&before)
		done := make(chan struct{})
		peak := before.HeapInuse
		go func() {
			defer close(done)
			f()
		}()
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				var after runtime.MemStats
				runtime.ReadMemStats(&after)
				return after.TotalAlloc - before.TotalAlloc, peak - before.HeapInuse
			case <-tick.C:
				var m runtime.MemStats
				runtime.ReadMemStats(&m)
				peak = max(peak, m.HeapInuse)
			}
		}
	}

	var vs []Violation
	start := time.Now()
	total, peak := allocated(func() {
		vs = e.Evaluate(ctx, compositionRequest(map[string]any{"n": int64(1e11)}))
	})
	took := time.Since(start)
	require.Len(t, vs, 1)
	assert.Contains(t, vs[0].Message, "numbers.range: the range has 100000000000 elements, more than the limit of 1048576 (--policy-max-range)")
	assert.Contains(t, vs[0].Message, "(denied: policies fail closed)")
	assert.Less(t, total, uint64(16<<20), "allocated %d bytes", total)
	t.Logf("numbers.range(1, 1e11) bounded: denied in %s, %d KiB allocated, heap in use grew by at most %d KiB", took, total>>10, peak>>10)

	// A range within the bound still works.
	vs = e.Evaluate(ctx, compositionRequest(map[string]any{"n": int64(1000)}))
	assert.Empty(t, vs)

	if testing.Short() {
		return
	}
	SetMaxRangeElements(1 << 62)
	defer SetMaxRangeElements(DefaultMaxRangeElements)
	start = time.Now()
	total, peak = allocated(func() {
		_ = e.Evaluate(ctx, compositionRequest(map[string]any{"n": int64(1e11)}))
	})
	t.Logf("numbers.range(1, 1e11) without the bound: stopped at the deadline after %s, %d MiB allocated, heap in use grew by up to %d MiB",
		time.Since(start), total>>20, peak>>20)
}
