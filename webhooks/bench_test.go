package webhooks

import (
	"bytes"
	"context"
	"encoding/json"
	"maps"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	corev1alpha1 "github.com/compositor-dev/compositor/api/core/v1alpha1"
	policyv1alpha1 "github.com/compositor-dev/compositor/api/policy/v1alpha1"
	"github.com/compositor-dev/compositor/api/vocab"
	"github.com/compositor-dev/compositor/policies"
	"github.com/compositor-dev/compositor/test/samplecharts"
)

// BenchmarkMutate measures one defaulting review through the HTTP handler, decoding and
// encoding included.
func BenchmarkMutate(b *testing.B) {
	body := review(b, compositionRequest("CREATE", composition(nil), nil))
	b.ReportAllocs()
	for b.Loop() {
		if code, _ := post(b, MutatePath, body, "application/json"); code != http.StatusOK {
			b.Fatalf("status %d", code)
		}
	}
}

// oneDefinition is a cluster with one CompositionDefinition, serving FireworksApp
// v1-1-5, and nothing else.
type oneDefinition struct{ noObjects }

func (oneDefinition) List(_ context.Context, list client.ObjectList, _ ...client.ListOption) error {
	if defs, ok := list.(*corev1alpha1.CompositionDefinitionList); ok {
		def := corev1alpha1.CompositionDefinition{}
		def.Namespace, def.Name = "fireworksapp-system", "fireworksapp"
		def.Status.APIVersion, def.Status.Kind, def.Status.Digest = vocab.CompositionGroup+"/v1-1-5", "FireworksApp", "sha256:bench"
		defs.Items = []corev1alpha1.CompositionDefinition{def}
	}
	return nil
}

// Get finds every namespace, without labels, and nothing else.
func (oneDefinition) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	if ns, ok := obj.(*corev1.Namespace); ok {
		ns.Name = key.Name
		return nil
	}
	return apierrors.NewNotFound(schema.GroupResource{}, key.Name)
}

type fixedChart struct{ chart *chart.Chart }

func (f fixedChart) Chart(context.Context, *corev1alpha1.CompositionDefinition) (*chart.Chart, string, error) {
	return f.chart, "sha256:bench", nil
}

// BenchmarkAdmitComposition measures what one admitted composition write costs
// Compositor: the /mutate review, which validates already, and the /validate review,
// each with the chart's schema and three policies, through the HTTP handlers.
func BenchmarkAdmitComposition(b *testing.B) {
	ctx := context.Background()
	engine, err := policies.NewEngine(ctx, policies.Options{})
	require.NoError(b, err)
	compositions := policyv1alpha1.Match{Kinds: []policyv1alpha1.KindMatcher{{Group: vocab.CompositionGroup, Kind: "*"}}}
	for name, rego := range map[string]string{
		"registries": "package registries\n\ndeny contains \"use registry.example.com\" if {\n\tnot startswith(input.review.object.spec.image.repository, \"registry.example.com/\")\n}\n",
		"replicas":   "package replicas\n\nwarn contains \"one replica has no redundancy\" if {\n\tobject.get(input.review.object.spec, \"replicaCount\", 1) < 2\n}\n",
		"team":       "package team\n\ndeny contains \"label team is required\" if {\n\tnot input.review.object.metadata.labels.team\n}\n",
	} {
		require.NoError(b, engine.Set(ctx, policies.Policy{Name: name, Origin: policies.OriginObject, File: name + ".rego", Rego: rego, Match: compositions}))
	}
	ch, err := samplecharts.Load("1.1.5")
	require.NoError(b, err)
	mutator, validator := newHandlers(Options{
		Cached: oneDefinition{},
		Live:   noObjects{},
		Judge:  policies.NewJudge(policies.JudgeOptions{Engine: engine}),
		Charts: fixedChart{chart: ch},
	})
	mutate, validate := guard(mutator), guard(validator)

	object := composition(map[string]any{"krateo.io/release-name": "demo", "krateo.io/paused": "false"})
	object["metadata"].(map[string]any)["labels"] = map[string]any{"team": "web", vocab.LabelCompositionVersion: "v1-1-5"}
	object["spec"] = map[string]any{
		"replicaCount": 3,
		"image":        map[string]any{"repository": "registry.example.com/web/nginx", "tag": "1.27"},
		"service":      map[string]any{"type": "ClusterIP", "port": 8080},
		"storage":      map[string]any{"size": "10Gi"},
		"cache":        map[string]any{"enabled": true, "maxMemory": "256Mi"},
	}
	answer := func(h http.Handler, body []byte) *admissionv1.AdmissionResponse {
		r := httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		review := &admissionv1.AdmissionReview{}
		if err := json.Unmarshal(w.Body.Bytes(), review); err != nil || review.Response == nil {
			b.Fatalf("not an AdmissionReview: %s", w.Body.String())
		}
		return review.Response
	}
	// The checks run: a value the schema refuses is refused by both.
	tooMany := review(b, compositionRequest("CREATE", withReplicas(object, 11), nil))
	for _, h := range []http.Handler{mutate, validate} {
		resp := answer(h, tooMany)
		require.False(b, resp.Allowed)
		require.Equal(b, "spec.replicaCount: must be <= 10 (values.schema.json)", resp.Result.Message)
	}

	body := review(b, compositionRequest("CREATE", object, nil))
	b.ReportAllocs()
	// In parallel, as the API server calls: with -cpu 1,2 the time per write should
	// halve when nothing serializes concurrent reviews.
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			for _, h := range []http.Handler{mutate, validate} {
				if resp := answer(h, body); !resp.Allowed {
					b.Errorf("not admitted: %v", resp.Result)
					return
				}
			}
		}
	})
}

func withReplicas(object map[string]any, n int) map[string]any {
	out := maps.Clone(object)
	spec := maps.Clone(object["spec"].(map[string]any))
	spec["replicaCount"] = n
	out["spec"] = spec
	return out
}
