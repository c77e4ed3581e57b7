package plan_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync/atomic"
	"testing"

	chart "helm.sh/helm/v4/pkg/chart/v2"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/compositor-dev/compositor/api/policy/v1alpha1"
	"github.com/compositor-dev/compositor/api/vocab"
	"github.com/compositor-dev/compositor/chartlint"
	"github.com/compositor-dev/compositor/plan"
	"github.com/compositor-dev/compositor/policies"
	"github.com/compositor-dev/compositor/test/samplecharts"
)

func loadTB(tb testing.TB, version string) *chart.Chart {
	tb.Helper()
	ch, err := samplecharts.Load(version)
	if err != nil {
		tb.Fatal(err)
	}
	return ch
}

// benchPolicies are CompositionPolicies of the kinds platform teams write: on the
// object (with parameters, a warning) and on the rendered objects (a deny and a warn).
var benchPolicies = []policies.Policy{
	{Name: "allowed-registries", Origin: policies.OriginObject, Rego: `package allowed_registries

deny contains {"msg": sprintf("image %q is not from an allowed registry", [repo]), "path": "spec.image.repository"} if {
	repo := input.review.object.spec.image.repository
	not startswith_any(repo, input.parameters.allowed)
}

startswith_any(s, prefixes) if {
	some p in prefixes
	startswith(s, p)
}
`, Parameters: map[string]any{"allowed": []any{"registry.example.com/", "docker.io/", "nginx"}}},
	{Name: "team-label", Origin: policies.OriginObject, Action: v1alpha1.EnforcementWarn, Rego: `package team_label

deny contains {"msg": "every composition needs a team label", "path": "metadata.labels.team"} if {
	not input.review.object.metadata.labels.team
}
`},
	{Name: "rendered-max-replicas", Origin: policies.OriginObject, Target: v1alpha1.TargetRendered, Rego: `package rendered_max_replicas

deny contains {"msg": sprintf("at most 12 replicas, not %d", [obj.spec.replicas]), "path": "spec.replicas"} if {
	some obj in input.rendered
	obj.kind == "Deployment"
	obj.spec.replicas > 12
}
`},
	{Name: "rendered-ha", Origin: policies.OriginObject, Target: v1alpha1.TargetRendered, Action: v1alpha1.EnforcementWarn, Rego: `package rendered_ha

deny contains {"msg": sprintf("a highly available app has at least 2 replicas, not %d", [obj.spec.replicas]), "path": "spec.replicas"} if {
	some obj in input.rendered
	obj.kind == "Deployment"
	obj.spec.replicas < 2
}
`},
}

// benchJudge is the judge admission uses: the schemas, the built-in policies and
// benchPolicies.
func benchJudge(tb testing.TB) *policies.Judge {
	tb.Helper()
	ctx := context.Background()
	e, err := policies.NewEngine(ctx, policies.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	if err := e.Sync(ctx, policies.OriginObject, benchPolicies); err != nil {
		tb.Fatal(err)
	}
	return policies.NewJudge(policies.JudgeOptions{Engine: e})
}

// variedCompositions are n 1.1.5 FireworksApps as a cluster holds them: 25 namespaces
// (and some in none), every service type, 1 to 10 replicas, images from several
// registries and tags, some with storage, one in five with the cache subchart, some
// with their own release name or pinned; and a few that 2.0.0 or the policies refuse
// (an exposure 2.0.0 does not know, replicas past the rendered policy's bound, an image
// of a registry not allowed).
func variedCompositions(n int) []map[string]any {
	types := []string{"ClusterIP", "ClusterIP", "LoadBalancer", "ClusterIP", "NodePort", "", "LoadBalancer", "ClusterIP"}
	repos := []string{"nginx", "registry.example.com/web/nginx", "docker.io/library/nginx"}
	pulls := []string{"IfNotPresent", "Always", "IfNotPresent", "Never"}
	ports := []int64{80, 8080, 443, 80, 3000}
	out := make([]map[string]any, 0, n)
	for i := range n {
		spec := map[string]any{
			"replicaCount": int64(1 + i%10),
			"image": map[string]any{
				"repository": repos[i%len(repos)],
				"tag":        fmt.Sprintf("1.27.%d", i%4),
				"pullPolicy": pulls[i%len(pulls)],
			},
		}
		svc := map[string]any{"port": ports[i%len(ports)]}
		if t := types[i%len(types)]; t != "" {
			svc["type"] = t
		}
		spec["service"] = svc
		if i%7 == 3 {
			spec["storage"] = map[string]any{"size": fmt.Sprintf("%dGi", 1+i%20)}
		}
		if i%5 == 0 {
			cache := map[string]any{"enabled": true}
			if i%10 == 0 {
				cache["maxMemory"] = fmt.Sprintf("%dMi", 64*(1+i%8))
			}
			spec["cache"] = cache
		}
		switch i % 100 {
		case 42: // 2.0.0's schema refuses it; 1.1.5 declared no exposure (and no
			// service type to convert over it)
			spec["exposure"] = "external"
			delete(svc, "type")
		case 77: // the rendered policy refuses 15 replicas
			spec["replicaCount"] = int64(15)
		case 91: // not an allowed registry
			spec["image"].(map[string]any)["repository"] = "quay.io/someone/nginx"
		}
		md := map[string]any{"name": fmt.Sprintf("app-%04d", i)}
		if i%40 != 39 {
			md["namespace"] = fmt.Sprintf("team-%02d", i%25)
		}
		labels := map[string]any{}
		if i%9 != 0 {
			labels["team"] = fmt.Sprintf("team-%02d", i%25)
		}
		if i%3 == 0 {
			labels[vocab.LabelCompositionVersion] = "v1-1-5"
		}
		if len(labels) > 0 {
			md["labels"] = labels
		}
		if i%11 == 0 {
			md["annotations"] = map[string]any{vocab.AnnotationReleaseName: fmt.Sprintf("rel-%04d", i)}
		}
		out = append(out, map[string]any{
			"apiVersion": "composition.krateo.io/v1-1-5",
			"kind":       "FireworksApp",
			"metadata":   md,
			"spec":       spec,
		})
	}
	return out
}

// BenchmarkCompute1000 plans moving 1,000 varied compositions from fireworks-app 1.1.5
// to 2.0.0, judged by the schemas, the built-in policies and benchPolicies, with one
// worker (as the definition reconciler plans beside admission) and with two:
//
//	go test ./plan/ -run '^$' -bench Compute1000 -benchtime=3x -benchmem
//
// One op is the whole plan of 1,000: its ns/op is the wall time of the plan.
func BenchmarkCompute1000(b *testing.B) {
	from, to := loadTB(b, "1.1.5"), loadTB(b, "2.0.0")
	judge := benchJudge(b)
	comps := variedCompositions(1000)
	ctx := context.Background()
	for _, workers := range []int{1, 2} {
		b.Run(fmt.Sprintf("workers=%d", workers), func(b *testing.B) {
			b.ReportAllocs()
			cpu0, cpuOK := cpuTime()
			for b.Loop() {
				p, err := plan.Compute(ctx, plan.Options{From: from, To: to, Judge: judge, Workers: workers}, comps)
				if err != nil {
					b.Fatal(err)
				}
				if p.Summary.ToMove != 1000 || p.Summary.Refused != 30 {
					b.Fatalf("summary %+v, want 1000 to move, 30 refused", p.Summary)
				}
			}
			// The CPU the plan took, on every core, garbage collection included: on a
			// busy machine the wall time (ns/op) varies much more.
			if cpu1, ok := cpuTime(); ok && cpuOK {
				b.ReportMetric((cpu1-cpu0).Seconds()/float64(b.N), "cpu-s/op")
			}
		})
	}
}

// A plan is the same, hash included, however many workers compute it: the varied
// compositions, refused ones among them, and some that cannot be planned at all.
func TestPlanWorkersSamePlan(t *testing.T) {
	comps := variedCompositions(120)
	other := variedCompositions(1)[0]
	other["kind"] = "SomethingElse"
	newer := variedCompositions(2)[1]
	newer["apiVersion"] = "composition.krateo.io/v2-0-0"
	malformed := variedCompositions(3)[2]
	malformed["spec"] = "not an object"
	comps = append(comps, other, newer, malformed)
	from, to := loadTB(t, "1.1.5"), loadTB(t, "2.0.0")
	judge := benchJudge(t)
	var want *plan.Plan
	for _, workers := range []int{1, 2, 0, 7} {
		p, err := plan.Compute(context.Background(), plan.Options{From: from, To: to, Judge: judge, Workers: workers}, comps)
		if err != nil {
			t.Fatal(err)
		}
		if want == nil {
			want = p
			if p.Summary.ToMove != 123 || p.Summary.Refused != 3+3 || p.Summary.Additions == 0 {
				t.Fatalf("summary %+v, want 123 to move, 6 refused (3 unplannable, 3 by the new version or the policies), additions", p.Summary)
			}
			continue
		}
		if p.Hash != want.Hash {
			t.Errorf("%d workers: hash %s, one worker %s", workers, p.Hash, want.Hash)
		}
		if !reflect.DeepEqual(p, want) {
			t.Errorf("%d workers: the plan differs from one worker's", workers)
		}
	}
}

// A canceled context stops Compute with its error: no plan, and no composition
// started after the cancel; those under way finish.
func TestPlanCanceled(t *testing.T) {
	from, to := loadTB(t, "1.1.5"), loadTB(t, "2.0.0")
	comps := variedCompositions(200)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	p, err := plan.Compute(ctx, plan.Options{From: from, To: to}, comps)
	if !errors.Is(err, context.Canceled) || p != nil {
		t.Errorf("canceled before: plan %v, err %v; want no plan and context.Canceled", p != nil, err)
	}

	// Canceled while the renders of a composition look its objects up. The judge
	// checks nothing: a schema check cut short by the cancel leaves a goroutine of
	// package policies writing its result (see policies.Renderer.validate).
	mapper := &countingMapper{RESTMapper: chartlint.RESTMapper()}
	if _, err := plan.Compute(context.Background(), plan.Options{From: from, To: to, Mapper: mapper}, comps[:1]); err != nil {
		t.Fatal(err)
	}
	perComposition := mapper.calls.Load() // the RBAC change's and one composition's
	for _, workers := range []int{1, 2} {
		ctx, cancel := context.WithCancel(context.Background())
		mapper := &countingMapper{RESTMapper: chartlint.RESTMapper(), cancelAt: 5 * perComposition, cancel: cancel}
		p, err := plan.Compute(ctx, plan.Options{From: from, To: to, Judge: &policies.Judge{}, Mapper: mapper, Workers: workers}, comps)
		cancel()
		if !errors.Is(err, context.Canceled) || p != nil {
			t.Errorf("%d workers, canceled during: plan %v, err %v; want no plan and context.Canceled", workers, p != nil, err)
		}
		// Each worker finishes the composition it is planning, no more.
		if n, most := mapper.calls.Load(), (5+int64(workers))*perComposition; n > most {
			t.Errorf("%d workers: %d lookups, want at most %d: compositions started after the cancel", workers, n, most)
		}
	}
}

// countingMapper counts RESTMapping calls and calls cancel at the cancelAt-th.
type countingMapper struct {
	meta.RESTMapper
	calls    atomic.Int64
	cancelAt int64
	cancel   func()
}

func (m *countingMapper) RESTMapping(gk schema.GroupKind, versions ...string) (*meta.RESTMapping, error) {
	if m.calls.Add(1) == m.cancelAt {
		m.cancel()
	}
	return m.RESTMapper.RESTMapping(gk, versions...)
}
