package gatekeeper_test

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"

	"github.com/compositor-dev/compositor/policies"
	"github.com/compositor-dev/compositor/policies/gatekeeper"
	"github.com/compositor-dev/compositor/test/samplecharts"
)

// writeReviews are the library reviews of one composition's admission write in
// `make bench-constraints`, as reviewConstraints makes them: fireworks-app 1.1.5 with
// its values-full example, created in namespace bench (labelled team: a), then each
// object its chart renders and the Pod its Deployment implies, with the release's
// objects as their inventory.
func writeReviews(t testing.TB) []benchReview {
	t.Helper()
	ch, err := samplecharts.Load("1.1.5")
	require.NoError(t, err)
	data, err := os.ReadFile(filepath.Join("..", "..", "samples", "charts", "fireworks-app", "examples", "1.1.5", "values-full.yaml"))
	require.NoError(t, err)
	var spec map[string]any
	require.NoError(t, yaml.Unmarshal(data, &spec))
	const ns = "bench"
	nsObject := map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": ns,
		"labels": map[string]any{"team": "a", "kubernetes.io/metadata.name": ns}}}
	// The empty userInfo of the load's requests, as userInfoDoc gives it.
	userInfo := map[string]any{"username": "", "uid": "", "groups": []any{}, "extra": map[string]any{}}
	comp := map[string]any{"apiVersion": "composition.krateo.io/v1-1-5", "kind": "FireworksApp",
		"metadata": map[string]any{"name": "x", "namespace": ns, "labels": map[string]any{"team": "a"}}, "spec": spec}
	self := gatekeeper.SubjectOf(comp)
	self.NamespaceObject = nsObject
	out := []benchReview{{"the composition", self, &gatekeeper.Request{Operation: "CREATE", UserInfo: userInfo}}}
	objs, err := policies.Render(ch, spec, policies.RenderOptions{ReleaseName: "x", Namespace: ns})
	require.NoError(t, err)
	subjects := renderedSubjects(objs, ns, nsObject)
	req := &gatekeeper.Request{Operation: "CREATE", UserInfo: userInfo, Inventory: gatekeeper.Inventory(subjects)}
	for i, s := range subjects {
		out = append(out, benchReview{objs[i].Ref(), s, req})
		if pod := gatekeeper.Expand(s); pod != nil {
			podReq := &gatekeeper.Request{Operation: "CREATE", UserInfo: userInfo, Inventory: req.Inventory}
			out = append(out, benchReview{objs[i].Ref() + "'s pod", pod, podReq})
		}
	}
	return out
}

// BenchmarkLibraryWrite times the library's part of one admission write of the
// bench: the 50 constraints of test/bench/constraints on the composition and what its
// chart renders (the render aside, which the baseline pays alike):
//
//	go test ./policies/gatekeeper/ -run '^$' -bench LibraryWrite -benchmem
func BenchmarkLibraryWrite(b *testing.B) {
	lib := benchLibrary(b)
	reviews := writeReviews(b)
	ctx := context.Background()
	violations := 0
	for _, r := range reviews {
		for _, res := range lib.Review(ctx, r.subject, r.request) {
			require.NoError(b, res.Err, r.name)
			violations++
		}
	}
	b.Logf("%d reviews, %d violations", len(reviews), violations)
	b.ReportAllocs()
	for b.Loop() {
		for _, r := range reviews {
			lib.Review(ctx, r.subject, r.request)
		}
	}
}

// renderedSubjects are the subjects of a chart's rendered objects, as the engine reviews
// them in namespace ns: an object the chart left without a namespace is placed in ns,
// and each sees ns's Namespace object.
func renderedSubjects(objs []policies.RenderedObject, ns string, nsObject map[string]any) []*gatekeeper.Subject {
	subjects := make([]*gatekeeper.Subject, 0, len(objs))
	for _, o := range objs {
		s := gatekeeper.SubjectOf(o.Object)
		if s.Namespace == "" {
			obj := maps.Clone(o.Object)
			md, _ := obj["metadata"].(map[string]any)
			md = maps.Clone(md)
			md["namespace"] = ns
			obj["metadata"] = md
			s.Object, s.Namespace = obj, ns
		}
		s.NamespaceObject = nsObject
		subjects = append(subjects, s)
	}
	return subjects
}
