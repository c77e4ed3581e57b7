package plan_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	chart "helm.sh/helm/v4/pkg/chart/v2"
	"sigs.k8s.io/yaml"

	"github.com/compositor-dev/compositor/api/vocab"
	"github.com/compositor-dev/compositor/plan"
	"github.com/compositor-dev/compositor/policies"
	"github.com/compositor-dev/compositor/test/samplecharts"
)

func load(t *testing.T, version string) *chart.Chart {
	t.Helper()
	ch, err := samplecharts.Load(version)
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

// composition is a 1.1.5 FireworksApp named name in namespace team-a with spec.
func composition(t *testing.T, name, spec string) map[string]any {
	t.Helper()
	obj := map[string]any{}
	doc := `apiVersion: composition.krateo.io/v1-1-5
kind: FireworksApp
metadata:
  name: ` + name + `
  namespace: team-a
spec:
` + spec
	if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
		t.Fatal(err)
	}
	return obj
}

// threeCompositions are a LoadBalancer, a ClusterIP and one 2.0.0 refuses (the
// exposure enum of examples/2.0.0/invalid-exposure.yaml, which 1.1.5, declaring no
// exposure, lets through), given out of order.
func threeCompositions(t *testing.T) []map[string]any {
	return []map[string]any{
		composition(t, "web", "  service:\n    type: LoadBalancer\n    port: 8080\n"),
		composition(t, "internal", "  replicaCount: 2\n  service:\n    type: ClusterIP\n"),
		composition(t, "bad", "  exposure: external\n  service:\n    port: 80\n"),
	}
}

func compute(t *testing.T, compositions []map[string]any) *plan.Plan {
	t.Helper()
	p, err := plan.Compute(context.Background(), plan.Options{From: load(t, "1.1.5"), To: load(t, "2.0.0")}, compositions)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func byName(t *testing.T, p *plan.Plan, name string) plan.Composition {
	t.Helper()
	for _, c := range p.Compositions {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no composition %s in the plan: %+v", name, p.Compositions)
	return plan.Composition{}
}

func hasRef(refs []plan.ObjectRef, kind string) bool {
	return slices.ContainsFunc(refs, func(r plan.ObjectRef) bool { return r.Kind == kind })
}

func TestPlanSampleChart(t *testing.T) {
	p := compute(t, threeCompositions(t))
	if p.Chart != "fireworks-app" || p.Kind != "FireworksApp" || p.From != "1.1.5" || p.To != "2.0.0" || p.FromVersion != "v1-1-5" || p.ToVersion != "v2-0-0" {
		t.Errorf("plan header = %s %s %s→%s (%s→%s)", p.Chart, p.Kind, p.From, p.To, p.FromVersion, p.ToVersion)
	}
	var names []string
	for _, c := range p.Compositions {
		names = append(names, c.Namespace+"/"+c.Name)
	}
	if want := []string{"team-a/bad", "team-a/internal", "team-a/web"}; !slices.Equal(names, want) {
		t.Errorf("compositions = %v, want %v (sorted)", names, want)
	}

	web := byName(t, p, "web")
	if got := web.Values["exposure"]; got != "public" {
		t.Errorf("web: exposure = %v, want public (LoadBalancer converted); values %v", got, web.Values)
	}
	if svc, _ := web.Values["service"].(map[string]any); svc["type"] != nil || svc["port"] != int64(8080) {
		t.Errorf("web: service = %v, want port 8080 and no type (moved to exposure)", svc)
	}
	if len(web.Refused) > 0 {
		t.Errorf("web refused: %v", web.Refused)
	}
	if len(web.Added) != 1 || web.Added[0].Kind != "Ingress" || web.Added[0].APIVersion != "networking.k8s.io/v1" ||
		web.Added[0].Namespace != "team-a" || !strings.HasPrefix(web.Added[0].Name, "web") {
		t.Errorf("web: added = %v, want its Ingress in team-a", web.Added)
	}
	if len(web.Deleted) > 0 {
		t.Errorf("web: deleted = %v, want none", web.Deleted)
	}
	// The Service's type was LoadBalancer; 2.0.0 always renders ClusterIP.
	i := slices.IndexFunc(web.Changed, func(c plan.ObjectChange) bool { return c.Kind == "Service" })
	if i < 0 || !slices.Contains(web.Changed[i].Fields, "spec.type") {
		t.Errorf("web: changed = %+v, want the Service's spec.type", web.Changed)
	}

	internal := byName(t, p, "internal")
	if internal.Values["exposure"] != "internal" || len(internal.Refused) > 0 || len(internal.Added) > 0 || len(internal.Deleted) > 0 {
		t.Errorf("internal: exposure %v, refused %v, added %v, deleted %v; want internal, nothing refused, added or deleted",
			internal.Values["exposure"], internal.Refused, internal.Added, internal.Deleted)
	}
	if internal.Values["replicaCount"] != int64(2) {
		t.Errorf("internal: replicaCount = %#v, want 2", internal.Values["replicaCount"])
	}

	bad := byName(t, p, "bad")
	// 1.1.5 admits it: the refusal is the move's.
	req := policies.NewRequest(policies.Write{Operation: "CREATE", Object: threeCompositions(t)[2], Chart: load(t, "1.1.5")})
	if d, err := policies.NewJudge(policies.JudgeOptions{}).Decide(context.Background(), req); err != nil || d.Denied() {
		t.Fatalf("1.1.5 refuses the bad composition (%v): %s", err, d.Message())
	}
	if len(bad.Refused) != 1 || !strings.HasPrefix(bad.Refused[0], "spec.exposure: ") || !strings.HasSuffix(bad.Refused[0], "(values.schema.json)") {
		t.Errorf("bad: refused = %q, want one schema violation of spec.exposure", bad.Refused)
	}

	want := plan.Summary{ToMove: 3, Refused: 1, Additions: 1, Deletions: 0, Changed: p.Summary.Changed}
	if p.Summary != want || p.Summary.Changed == 0 {
		t.Errorf("summary = %+v, want %+v with some changed objects", p.Summary, want)
	}
	if !strings.HasPrefix(p.Hash, "sha256:") || len(p.Hash) != len("sha256:")+64 {
		t.Errorf("hash = %q", p.Hash)
	}
}

// A NodePort composition moves to exposure public: the declared conversion runs from
// the version the composition is pinned to, which the move changes only after reading
// it through 2.0.0.
func TestPlanNodePortBecomesPublic(t *testing.T) {
	obj := composition(t, "np", "  service:\n    type: NodePort\n")
	obj["metadata"].(map[string]any)["labels"] = map[string]any{vocab.LabelCompositionVersion: "v1-1-5"}
	p := compute(t, []map[string]any{obj})
	c := p.Compositions[0]
	if c.Values["exposure"] != "public" || len(c.Refused) > 0 || !hasRef(c.Added, "Ingress") {
		t.Errorf("NodePort: values %v, refused %v, added %v; want exposure public, an Ingress added", c.Values, c.Refused, c.Added)
	}
	// The input is not modified.
	if obj["metadata"].(map[string]any)["labels"].(map[string]any)[vocab.LabelCompositionVersion] != "v1-1-5" || obj["apiVersion"] != "composition.krateo.io/v1-1-5" {
		t.Errorf("Compute modified its input: %v", obj)
	}
}

func TestPlanHash(t *testing.T) {
	a, b := compute(t, threeCompositions(t)), compute(t, threeCompositions(t))
	if a.Hash != b.Hash {
		t.Errorf("the same plan twice: hashes %s and %s", a.Hash, b.Hash)
	}
	if d, err := a.Digest(); err != nil || d != a.Hash {
		t.Errorf("Digest() = %s, %v; want the plan's hash %s", d, err, a.Hash)
	}
	changed := threeCompositions(t)
	changed[1] = composition(t, "internal", "  replicaCount: 3\n  service:\n    type: ClusterIP\n")
	if c := compute(t, changed); c.Hash == a.Hash {
		t.Errorf("a changed composition kept the hash %s", a.Hash)
	}
}

func TestPlanRBAC(t *testing.T) {
	p := compute(t, nil)
	if !slices.Contains(p.RBAC.Gained, "ingresses.networking.k8s.io") || len(p.RBAC.Lost) > 0 {
		t.Errorf("RBAC = %+v, want ingresses.networking.k8s.io gained, nothing lost", p.RBAC)
	}
	if len(p.Compositions) != 0 || p.Summary != (plan.Summary{}) {
		t.Errorf("no compositions: %+v", p)
	}
	// Back to 1.1.5, the Ingress is lost, and a public composition's Ingress deleted.
	obj := composition(t, "web", "  exposure: public\n  service:\n    port: 80\n")
	obj["apiVersion"] = "composition.krateo.io/v2-0-0"
	back, err := plan.Compute(context.Background(), plan.Options{From: load(t, "2.0.0"), To: load(t, "1.1.5")}, []map[string]any{obj})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(back.RBAC.Lost, "ingresses.networking.k8s.io") || len(back.RBAC.Gained) > 0 {
		t.Errorf("RBAC 2.0.0 → 1.1.5 = %+v, want ingresses lost", back.RBAC)
	}
	c := back.Compositions[0]
	if !hasRef(c.Deleted, "Ingress") || back.Summary.Deletions != 1 {
		t.Errorf("2.0.0 → 1.1.5: deleted %v, summary %+v; want the Ingress deleted", c.Deleted, back.Summary)
	}
	if svc, _ := c.Values["service"].(map[string]any); svc["type"] != "LoadBalancer" {
		t.Errorf("2.0.0 → 1.1.5: service = %v, want type LoadBalancer (public reversed)", c.Values["service"])
	}
}

func TestPlanCompositionErrors(t *testing.T) {
	other := composition(t, "other", "  service: {}\n")
	other["kind"] = "SomethingElse"
	newer := composition(t, "newer", "  service: {}\n")
	newer["apiVersion"] = "composition.krateo.io/v2-0-0"
	pinned := composition(t, "pinned", "  service: {}\n")
	pinned["metadata"].(map[string]any)["labels"] = map[string]any{vocab.LabelCompositionVersion: "v2-0-0"}
	ok := composition(t, "ok", "  service: {}\n")
	p := compute(t, []map[string]any{other, newer, pinned, ok})
	for name, want := range map[string]string{
		"other":  "is not a composition of chart fireworks-app",
		"newer":  "is of version v2-0-0, not v1-1-5",
		"pinned": "pinned to v2-0-0",
	} {
		c := byName(t, p, name)
		if len(c.Refused) != 1 || !strings.Contains(c.Refused[0], want) {
			t.Errorf("%s: refused = %q, want one line with %q", name, c.Refused, want)
		}
	}
	if c := byName(t, p, "ok"); len(c.Refused) > 0 {
		t.Errorf("ok: refused %q", c.Refused)
	}
	if p.Summary.Refused != 3 || p.Summary.ToMove != 4 {
		t.Errorf("summary = %+v, want 4 to move, 3 refused", p.Summary)
	}
}

func TestPlanBadCharts(t *testing.T) {
	from := load(t, "1.1.5")
	other := load(t, "2.0.0")
	other.Metadata = &chart.Metadata{Name: "another", Version: "2.0.0", APIVersion: "v2"}
	for name, opts := range map[string]plan.Options{
		"no from":    {To: from},
		"no to":      {From: from},
		"same":       {From: from, To: from},
		"two charts": {From: from, To: other},
	} {
		_, err := plan.Compute(context.Background(), opts, nil)
		if !errors.Is(err, plan.ErrBadChart) {
			t.Errorf("%s: err = %v, want ErrBadChart", name, err)
		}
	}
}

// TestPlanRenderTimeout: a render past Options.RenderTimeout refuses its composition,
// as admission refuses a render past its deadline, and the plan goes on.
func TestPlanRenderTimeout(t *testing.T) {
	p, err := plan.Compute(context.Background(), plan.Options{From: load(t, "1.1.5"), To: load(t, "2.0.0"), RenderTimeout: time.Nanosecond}, threeCompositions(t))
	if err != nil {
		t.Fatal(err)
	}
	if p.Summary.ToMove != 3 || p.Summary.Refused != 3 {
		t.Fatalf("want 3 compositions, all refused, got %+v", p.Summary)
	}
	for _, c := range p.Compositions {
		if !slices.ContainsFunc(c.Refused, func(r string) bool { return strings.Contains(r, "did not finish in time") }) {
			t.Errorf("%s: want a refusal for the render's deadline, got %q", c.Name, c.Refused)
		}
	}
}

// TestPlanRedacted: the plan without the compositions' values keeps its hash, which
// still changes with the values.
func TestPlanRedacted(t *testing.T) {
	p := compute(t, threeCompositions(t))
	redacted := p.Redacted()
	for _, c := range redacted.Compositions {
		if c.Values != nil || c.ValuesDigest == "" && len(c.Refused) == 0 {
			t.Errorf("%s: want no values and their digest, got %v, %q", c.Name, c.Values, c.ValuesDigest)
		}
	}
	if p.Compositions[0].Values == nil {
		t.Fatal("Redacted changed the plan it redacts")
	}
	got, err := redacted.Digest()
	if err != nil || got != p.Hash {
		t.Fatalf("the redacted plan hashes to %s (%v), want %s", got, err, p.Hash)
	}
	other := threeCompositions(t)
	other[0]["spec"].(map[string]any)["replicaCount"] = 3
	if compute(t, other).Hash == p.Hash {
		t.Fatal("other values give the same hash")
	}
}
