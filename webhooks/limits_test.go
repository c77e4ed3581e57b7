package webhooks

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	policyv1alpha1 "github.com/compositor-dev/compositor/api/policy/v1alpha1"
	"github.com/compositor-dev/compositor/api/vocab"
	"github.com/compositor-dev/compositor/policies"
	"github.com/compositor-dev/compositor/test/samplecharts"
)

// deepSpec is a spec whose key nest is nested levels deep.
func deepSpec(levels int) map[string]any {
	var v any = "x"
	for range levels {
		v = map[string]any{"nest": v}
	}
	return v.(map[string]any)
}

// countingHandlers are handlers whose schema check counts its runs and, for a spec
// with slow: true, waits until release is closed.
func countingHandlers(t *testing.T, timeout time.Duration, perLane int, release <-chan struct{}) (*Mutator, *Validator, *atomic.Int64) {
	t.Helper()
	engine, err := policies.NewEngine(context.Background(), policies.Options{Timeout: timeout, DisabledBuiltins: policies.BuiltinIDs()})
	require.NoError(t, err)
	ch, err := samplecharts.Load("1.1.5")
	require.NoError(t, err)
	var runs atomic.Int64
	schemas := policies.SchemaValidatorFunc(func(_ context.Context, _ *chart.Chart, _ string, spec map[string]any) ([]policies.Violation, error) {
		runs.Add(1)
		if spec["slow"] == true {
			<-release
		}
		return nil, nil
	})
	m, v := newHandlers(Options{
		Cached:          oneDefinition{},
		Live:            noObjects{},
		Judge:           policies.NewJudge(policies.JudgeOptions{Schemas: schemas, Engine: engine}),
		Charts:          fixedChart{chart: ch},
		LaneConcurrency: perLane,
	})
	return m, v, &runs
}

func named(spec map[string]any) map[string]any {
	object := composition(map[string]any{"krateo.io/release-name": "demo", "krateo.io/paused": "false"})
	object["spec"] = spec
	return withLabel(object, vocab.LabelCompositionVersion, "v1-1-5")
}

func inNamespace(req map[string]any, namespace string) map[string]any {
	req["namespace"] = namespace
	req["object"].(map[string]any)["metadata"].(map[string]any)["namespace"] = namespace
	return req
}

// A composition nested 9,000 levels deep is refused by both webhooks before the schema
// check or a policy runs, naming the field, the depth and the limit with its flag; the
// refusal is counted on /metrics.
func TestDeepCompositionRefusedBeforeTheChecks(t *testing.T) {
	ctx := context.Background()
	mutator, validator, runs := countingHandlers(t, 2*time.Second, 0, nil)
	before := refusals(policies.LimitDepth)
	for name, h := range map[string]admission.Handler{"mutate": mutator, "validate": validator} {
		resp := h.Handle(ctx, admissionRequest(t, compositionRequest("CREATE", named(deepSpec(9000)), nil)))
		require.False(t, resp.Allowed, name)
		assert.Equal(t, int32(http.StatusUnprocessableEntity), resp.Result.Code, name)
		assert.Equal(t, "spec.nest.nest.…(9001 levels): nested 9001 levels deep, more than the limit of 64 (--max-value-depth)", resp.Result.Message, name)
		require.Len(t, resp.Result.Details.Causes, 1)
		assert.Equal(t, "spec.nest.nest.…(9001 levels)", resp.Result.Details.Causes[0].Field)
	}
	assert.Zero(t, runs.Load(), "no schema check ran")
	assert.Equal(t, before+2, refusals(policies.LimitDepth))

	// Each bound, with the limits given.
	_, validator, runs = countingHandlers(t, 2*time.Second, 0, nil)
	validator.limits = policies.Limits{MaxDepth: 64, MaxKeys: 100, MaxStringBytes: 1024}
	list := make([]any, 200)
	for i := range list {
		list[i] = "v"
	}
	for reason, spec := range map[string]map[string]any{
		policies.LimitKeys:   {"list": list},
		policies.LimitString: {"blob": strings.Repeat("b", 2048)},
	} {
		before := refusals(reason)
		resp := validator.Handle(ctx, admissionRequest(t, compositionRequest("CREATE", named(spec), nil)))
		require.False(t, resp.Allowed, reason)
		assert.Contains(t, resp.Result.Message, "spec.", reason)
		assert.Equal(t, before+1, refusals(reason), reason)
	}

	// An ordinary composition passes the bounds and is judged.
	resp := validator.Handle(ctx, admissionRequest(t, compositionRequest("CREATE", named(map[string]any{"replicaCount": 2}), nil)))
	assert.True(t, resp.Allowed, "%v", resp.Result)
	assert.Equal(t, int64(1), runs.Load())
}

// A composition stored before the limits were lowered can still be deleted: the update
// that only removes its finalizer is not measured; any other update is.
func TestBoundsLetADeletedCompositionGo(t *testing.T) {
	ctx := context.Background()
	mutator, validator, _ := countingHandlers(t, 2*time.Second, 0, nil)
	deleting := func() map[string]any {
		object := named(deepSpec(100))
		object["metadata"].(map[string]any)["deletionTimestamp"] = "2026-11-22T06:00:00Z"
		return object
	}
	old := deleting()
	old["metadata"].(map[string]any)["finalizers"] = []any{"composition.krateo.io/finalizer"}
	for name, h := range map[string]admission.Handler{"mutate": mutator, "validate": validator} {
		resp := h.Handle(ctx, admissionRequest(t, compositionRequest("UPDATE", deleting(), old)))
		assert.True(t, resp.Allowed, "%s: %v", name, resp.Result)
		changed := withLabel(deleting(), "team", "web")
		resp = h.Handle(ctx, admissionRequest(t, compositionRequest("UPDATE", changed, old)))
		assert.False(t, resp.Allowed, name)
	}
}

// Fairness: namespace team-a floods /validate with writes whose schema check does not
// end, many at once; team-b's writes are all admitted while team-a's still wait, and
// team-a holds no more evaluations at once than its lane allows. Ordering, not timing.
func TestOneNamespaceFloodingDelaysOnlyItself(t *testing.T) {
	ctx := context.Background()
	release := make(chan struct{})
	var once sync.Once
	defer once.Do(func() { close(release) })
	_, validator, runs := countingHandlers(t, time.Minute, 1, release)

	const flood = 8
	var aDone atomic.Int64
	var wg sync.WaitGroup
	for range flood {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp := validator.Handle(ctx, admissionRequest(t, inNamespace(compositionRequest("CREATE", named(map[string]any{"slow": true}), nil), "team-a")))
			assert.True(t, resp.Allowed, "%v", resp.Result)
			aDone.Add(1)
		}()
	}
	require.Eventually(t, func() bool { return runs.Load() == 1 }, 10*time.Second, time.Millisecond, "team-a's first write runs")

	// Every write of team-b, and a definition of team-a, is admitted while team-a's
	// compositions wait.
	for i := range 5 {
		resp := validator.Handle(ctx, admissionRequest(t, inNamespace(compositionRequest("CREATE", named(map[string]any{"replicaCount": 2}), nil), "team-b")))
		require.True(t, resp.Allowed, "team-b write %d: %v", i, resp.Result)
	}
	assert.Zero(t, aDone.Load(), "no write of team-a finished before team-b's")
	assert.Equal(t, int64(1+5), runs.Load(), "team-a ran one schema check at a time: its lane holds one")

	once.Do(func() { close(release) })
	wg.Wait()
	assert.Equal(t, int64(flood), aDone.Load())
	assert.Equal(t, int64(flood+5), runs.Load())
}

// A write that waits in its namespace's lane past the deadline is refused with 429 and
// a message naming the lane and the flag, and counted as fairness. The lane is held
// here by work that does not stop at the deadline.
func TestLaneFullUntilTheDeadlineIsRefused(t *testing.T) {
	ctx := context.Background()
	release := make(chan struct{})
	_, validator, _ := countingHandlers(t, 300*time.Millisecond, 1, release)
	holder := &Request{Request: admissionRequest(t, inNamespace(compositionRequest("CREATE", named(nil), nil), "team-a"))}
	held := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		validator.gated(ctx, holder, func(context.Context) admission.Response {
			close(held)
			<-release
			return admission.Allowed("")
		})
	}()
	<-held

	before := refusals(RefusedFairness)
	resp := validator.Handle(ctx, admissionRequest(t, inNamespace(compositionRequest("CREATE", named(map[string]any{"replicaCount": 2}), nil), "team-a")))
	require.False(t, resp.Allowed)
	assert.Equal(t, int32(http.StatusTooManyRequests), resp.Result.Code)
	assert.Contains(t, resp.Result.Message, "the compositions of namespace team-a already run 1 admission evaluations at once (--admission-namespace-concurrency)")
	assert.Equal(t, before+1, refusals(RefusedFairness))

	resp = validator.Handle(ctx, admissionRequest(t, inNamespace(compositionRequest("CREATE", named(map[string]any{"replicaCount": 2}), nil), "team-b")))
	assert.True(t, resp.Allowed, "team-b is not held: %v", resp.Result)
	close(release)
	<-done
}

func TestLaneOf(t *testing.T) {
	assert.Equal(t, "compositions of namespace x", laneOf(&Request{Request: admissionRequest(t, inNamespace(compositionRequest("CREATE", named(nil), nil), "x"))}))
}

// refusals reads compositor_admission_refusals_total{reason} as /metrics shows it.
func refusals(reason string) float64 {
	families, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		panic(err)
	}
	for _, f := range families {
		if f.GetName() != "compositor_admission_refusals_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "reason" && l.GetValue() == reason {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// BenchmarkBoundObject measures the bounds on an ordinary composition as /validate
// sees it (compare with BenchmarkAdmitComposition, the whole write).
func BenchmarkBoundObject(b *testing.B) {
	object := composition(map[string]any{"krateo.io/release-name": "demo", "krateo.io/paused": "false"})
	object["metadata"].(map[string]any)["labels"] = map[string]any{"team": "web", vocab.LabelCompositionVersion: "v1-1-5"}
	object["spec"] = map[string]any{
		"replicaCount": 3,
		"image":        map[string]any{"repository": "registry.example.com/web/nginx", "tag": "1.27"},
		"service":      map[string]any{"type": "ClusterIP", "port": 8080},
		"storage":      map[string]any{"size": "10Gi"},
		"cache":        map[string]any{"enabled": true, "maxMemory": "256Mi"},
	}
	req := &Request{Object: &unstructured.Unstructured{Object: object}}
	limits := policies.DefaultLimits()
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := boundObject(limits, req); !ok {
			b.Fatal("refused")
		}
	}
}

// BenchmarkAdmitCompositionBounds is BenchmarkAdmitComposition's ordinary write (the
// /mutate and /validate reviews, schema and three policies) with the bounds and lanes
// and without them, in one process, so that -count interleaves the two.
func BenchmarkAdmitCompositionBounds(b *testing.B) {
	ctx := context.Background()
	engine, err := policies.NewEngine(ctx, policies.Options{})
	require.NoError(b, err)
	ch, err := samplecharts.Load("1.1.5")
	require.NoError(b, err)
	object := named(map[string]any{
		"replicaCount": 3,
		"image":        map[string]any{"repository": "registry.example.com/web/nginx", "tag": "1.27"},
		"service":      map[string]any{"type": "ClusterIP", "port": 8080},
		"storage":      map[string]any{"size": "10Gi"},
		"cache":        map[string]any{"enabled": true, "maxMemory": "256Mi"},
	})
	req := compositionRequest("CREATE", object, nil)
	for _, bounded := range []bool{true, false} {
		name := "without-bounds"
		if bounded {
			name = "with-bounds"
		}
		b.Run(name, func(b *testing.B) {
			mutator, validator := newHandlers(Options{
				Cached: oneDefinition{},
				Live:   noObjects{},
				Judge:  policies.NewJudge(policies.JudgeOptions{Engine: engine}),
				Charts: fixedChart{chart: ch},
			})
			if !bounded {
				validator.limits, validator.lanes = policies.Limits{}, nil
			}
			ar := admissionRequest(b, req)
			b.ReportAllocs()
			for b.Loop() {
				for _, h := range []admission.Handler{mutator, validator} {
					if resp := h.Handle(ctx, ar); !resp.Allowed {
						b.Fatalf("not admitted: %v", resp.Result)
					}
				}
			}
		})
	}
}

// A policy that asks numbers.range for 1e11 numbers is stopped before it builds any;
// the write is denied (fail closed) naming the limit, and counted as range.
func TestHugeRangeInAPolicyIsRefusedAndCounted(t *testing.T) {
	ctx := context.Background()
	engine, err := policies.NewEngine(ctx, policies.Options{DisabledBuiltins: policies.BuiltinIDs()})
	require.NoError(t, err)
	require.NoError(t, engine.Set(ctx, policies.Policy{
		Name: "huge", Origin: policies.OriginObject, File: "huge.rego",
		Rego:  "package huge\n\ndeny contains \"never\" if {\n\tcount(numbers.range(1, input.review.object.spec.replicaCount * 10000000000)) < 0\n}\n",
		Match: policyv1alpha1.Match{Kinds: []policyv1alpha1.KindMatcher{{Group: vocab.CompositionGroup, Kind: "*"}}},
	}))
	ch, err := samplecharts.Load("1.1.5")
	require.NoError(t, err)
	_, validator := newHandlers(Options{
		Cached: oneDefinition{}, Live: noObjects{},
		Judge:  policies.NewJudge(policies.JudgeOptions{Engine: engine}),
		Charts: fixedChart{chart: ch},
	})
	before := refusals(RefusedRange)
	resp := validator.Handle(ctx, admissionRequest(t, compositionRequest("CREATE", named(map[string]any{"replicaCount": 2}), nil)))
	require.False(t, resp.Allowed)
	assert.Contains(t, resp.Result.Message, "more than the limit of 1048576 (--policy-max-range)", "stopped at the bound, not at the deadline")
	assert.Equal(t, before+1, refusals(RefusedRange))
}
