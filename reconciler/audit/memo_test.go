package audit

import (
	"context"
	"crypto/sha256"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	chartcommon "helm.sh/helm/v4/pkg/chart/common"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"sigs.k8s.io/controller-runtime/pkg/client"

	corev1alpha1 "github.com/compositor-dev/compositor/api/core/v1alpha1"
	policyv1alpha1 "github.com/compositor-dev/compositor/api/policy/v1alpha1"
	"github.com/compositor-dev/compositor/api/vocab"
	"github.com/compositor-dev/compositor/policies"
	"github.com/compositor-dev/compositor/test/controlplane"
)

// countingSandbox renders in-process, as Render does, and records every render with
// the lane it ran in.
type countingSandbox struct {
	mu      sync.Mutex
	renders []sandboxRender
}

type sandboxRender struct {
	lane string
	opts policies.RenderOptions
}

func (s *countingSandbox) Render(ctx context.Context, _ string, ch *chart.Chart, _ string, spec map[string]any, opts policies.RenderOptions) ([]policies.RenderedObject, error) {
	s.mu.Lock()
	s.renders = append(s.renders, sandboxRender{lane: policies.LaneOf(ctx), opts: opts})
	s.mu.Unlock()
	return policies.Render(ch, spec, opts)
}

func (s *countingSandbox) RenderFiles(ctx context.Context, _ string, ch *chart.Chart, _ string, spec map[string]any, opts policies.RenderOptions) (map[string]string, error) {
	s.mu.Lock()
	s.renders = append(s.renders, sandboxRender{lane: policies.LaneOf(ctx), opts: opts})
	s.mu.Unlock()
	return policies.RenderFiles(ch, spec, opts)
}

func (s *countingSandbox) ValidateValues(context.Context, string, *chart.Chart, string, map[string]any) ([]policies.Violation, error) {
	return nil, nil
}

// take returns the renders since the last call.
func (s *countingSandbox) take() []sandboxRender {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.renders
	s.renders = nil
	return out
}

// widgetChart renders one ConfigMap whose size is the values' size, and says whether
// it was rendered as an upgrade.
func widgetChart() *chart.Chart {
	return &chart.Chart{
		Metadata: &chart.Metadata{APIVersion: "v2", Name: "widget", Version: "1.0.0"},
		Templates: []*chartcommon.File{{Name: "templates/cm.yaml", Data: []byte(`apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ .Release.Name }}-widget
data:
  size: {{ .Values.size | quote }}
  upgrade: {{ .Release.IsUpgrade | quote }}
`)}},
	}
}

const widgetDigest = "sha256:0000000000000000000000000000000000000000000000000000000000000001"

type oneChart struct{ ch *chart.Chart }

func (c oneChart) Chart(context.Context, *corev1alpha1.CompositionDefinition) (*chart.Chart, string, error) {
	return c.ch, widgetDigest, nil
}

const noBigWidgets = `package nobig

deny contains {"msg": sprintf("size %s is too big", [obj.data.size]), "path": "data.size"} if {
	some obj in input.rendered
	obj.kind == "ConfigMap"
	obj.data.size == "big"
}
`

// An audit pass over compositions nothing changed renders nothing and finds what the
// last one found; a change of a composition, of its namespace's labels or of the
// policies is judged again, each composition in its own namespace's lane, and an
// installed composition renders as its next upgrade.
func TestAuditJudgesOnlyWhatChanged(t *testing.T) {
	cp := controlplane.Start(t)
	ctx := t.Context()
	c := cp.Client

	sandbox := &countingSandbox{}

	// The generated API: one served version and the hub.
	preserve := &apiextensionsv1.JSONSchemaProps{Type: "object", XPreserveUnknownFields: ptr(true)}
	crd := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "widgets.composition.krateo.io", Labels: map[string]string{vocab.LabelManaged: "true"}},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "composition.krateo.io",
			Names: apiextensionsv1.CustomResourceDefinitionNames{Kind: "Widget", ListKind: "WidgetList", Plural: "widgets", Singular: "widget"},
			Scope: apiextensionsv1.NamespaceScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: "v1-0-0", Served: true, Storage: true,
				Schema:       &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: preserve},
				Subresources: &apiextensionsv1.CustomResourceSubresources{Status: &apiextensionsv1.CustomResourceSubresourceStatus{}},
			}},
		},
	}
	require.NoError(t, c.Create(ctx, crd))
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		got := &apiextensionsv1.CustomResourceDefinition{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(crd), got); err != nil {
			return false, err
		}
		for _, cond := range got.Status.Conditions {
			if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	}))

	for _, ns := range []string{"team-a", "team-b"} {
		require.NoError(t, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	}
	def := &corev1alpha1.CompositionDefinition{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "widget"}}
	def.Spec.Chart.URL, def.Spec.Chart.Version = "https://charts.invalid/widget-1.0.0.tgz", "1.0.0"
	require.NoError(t, c.Create(ctx, def))
	def.Status.Kind, def.Status.APIVersion, def.Status.Resource = "Widget", "composition.krateo.io/v1-0-0", "widgets"
	def.Status.Digest = widgetDigest
	require.NoError(t, c.Status().Update(ctx, def))

	widget := func(ns, name, size string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "composition.krateo.io/v1-0-0", "kind": "Widget",
			"metadata": map[string]any{"namespace": ns, "name": name, "labels": map[string]any{vocab.LabelCompositionVersion: "v1-0-0"}},
			"spec":     map[string]any{"size": size},
		}}
		require.NoError(t, c.Create(ctx, u))
		return u
	}
	big := widget("team-a", "big", "big")
	widget("team-b", "small", "small")
	// The controller says big is installed.
	require.NoError(t, unstructured.SetNestedField(big.Object, def.Status.Digest, "status", "digest"))
	require.NoError(t, c.Status().Update(ctx, big))

	policy := &policyv1alpha1.CompositionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "no-big-widgets"}}
	policy.Spec.Rego, policy.Spec.Target = noBigWidgets, policyv1alpha1.TargetRendered
	policy.Spec.EnforcementAction = policyv1alpha1.EnforcementDryRun
	require.NoError(t, c.Create(ctx, policy))
	engine, err := policies.NewEngine(ctx, policies.Options{})
	require.NoError(t, err)
	compiled, err := policies.FromCompositionPolicy(policy)
	require.NoError(t, err)
	require.NoError(t, engine.Set(ctx, compiled))

	a := &Auditor{Client: c, Reader: c, Judge: policies.NewJudge(policies.JudgeOptions{Engine: engine, Renderer: (&policies.Renderer{Sandbox: sandbox}).Remembering(policies.DefaultRenderMemoBytes)}), Charts: oneChart{widgetChart()}}
	judged := func() float64 { return counterValue(t, compositionsAudited.WithLabelValues("judged")) }
	unchanged := func() float64 { return counterValue(t, compositionsAudited.WithLabelValues("unchanged")) }
	audit := func() policyv1alpha1.AuditStatus {
		t.Helper()
		require.NoError(t, a.Audit(ctx))
		got := &policyv1alpha1.CompositionPolicy{}
		require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(policy), got))
		return got.Status.Audit
	}
	bigFound := policyv1alpha1.AuditViolation{
		APIVersion: "composition.krateo.io/v1-0-0", Kind: "Widget", Namespace: "team-a", Name: "big",
		Message: "ConfigMap/big-widget data.size: size big is too big",
	}

	t.Run("the first pass judges each composition in its namespace's lane", func(t *testing.T) {
		j := judged()
		status := audit()
		assert.EqualValues(t, 1, status.ViolationCount)
		assert.Equal(t, []policyv1alpha1.AuditViolation{bigFound}, status.Examples)
		assert.Equal(t, 2.0, judged()-j)
		renders := sandbox.take()
		require.Len(t, renders, 2)
		byLane := map[string]policies.RenderOptions{}
		for _, r := range renders {
			byLane[r.lane] = r.opts
		}
		require.Contains(t, byLane, policies.CompositionsLane("team-a"))
		require.Contains(t, byLane, policies.CompositionsLane("team-b"))
		assert.True(t, byLane[policies.CompositionsLane("team-a")].IsUpgrade, "an installed composition renders as its next upgrade")
		assert.False(t, byLane[policies.CompositionsLane("team-b")].IsUpgrade, "one not installed yet renders as its install")
	})

	t.Run("a pass over unchanged compositions renders nothing", func(t *testing.T) {
		j, u := judged(), unchanged()
		for range 3 {
			status := audit()
			assert.EqualValues(t, 1, status.ViolationCount)
			assert.Equal(t, []policyv1alpha1.AuditViolation{bigFound}, status.Examples)
		}
		assert.Empty(t, sandbox.take())
		assert.Equal(t, 0.0, judged()-j)
		assert.Equal(t, 6.0, unchanged()-u)
	})

	t.Run("a status write judges again, and renders nothing", func(t *testing.T) {
		j := judged()
		require.NoError(t, unstructured.SetNestedField(big.Object, "Healthy", "status", "health"))
		require.NoError(t, c.Status().Update(ctx, big))
		status := audit()
		assert.EqualValues(t, 1, status.ViolationCount)
		assert.Equal(t, []policyv1alpha1.AuditViolation{bigFound}, status.Examples)
		assert.Equal(t, 1.0, judged()-j, "an object policy may read the status")
		assert.Empty(t, sandbox.take(), "the render's inputs did not change")
	})

	t.Run("a changed composition is judged again, alone", func(t *testing.T) {
		j := judged()
		require.NoError(t, c.Patch(ctx, big, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"size":"medium"}}`))))
		status := audit()
		assert.EqualValues(t, 0, status.ViolationCount)
		assert.Equal(t, 1.0, judged()-j)
		assert.Len(t, sandbox.take(), 1)
	})

	t.Run("a namespace's new labels judge its compositions again", func(t *testing.T) {
		j := judged()
		ns := &corev1.Namespace{}
		require.NoError(t, c.Get(ctx, client.ObjectKey{Name: "team-b"}, ns))
		ns.Labels = map[string]string{"tier": "gold"}
		require.NoError(t, c.Update(ctx, ns))
		audit()
		assert.Equal(t, 1.0, judged()-j)
		assert.Empty(t, sandbox.take(), "judged on the render it had")
	})

	t.Run("a changed policy judges every composition again", func(t *testing.T) {
		j := judged()
		stricter := compiled
		stricter.Rego = `package nobig

deny contains {"msg": sprintf("size %s is too big", [obj.data.size]), "path": "data.size"} if {
	some obj in input.rendered
	obj.kind == "ConfigMap"
	obj.data.size != "small"
}
`
		require.NoError(t, engine.Set(ctx, stricter))
		status := audit()
		assert.EqualValues(t, 1, status.ViolationCount)
		assert.Equal(t, 2.0, judged()-j)
		assert.Empty(t, sandbox.take(), "the new policy judges the renders each had")
	})

	t.Run("a deleted composition is forgotten", func(t *testing.T) {
		require.NoError(t, c.Delete(ctx, big))
		require.NoError(t, wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
			err := c.Get(ctx, client.ObjectKeyFromObject(big), &unstructured.Unstructured{Object: map[string]any{"apiVersion": "composition.krateo.io/v1-0-0", "kind": "Widget"}})
			return client.IgnoreNotFound(err) == nil && err != nil, nil
		}))
		audit()
		a.verdicts.mu.Lock()
		defer a.verdicts.mu.Unlock()
		assert.Len(t, a.verdicts.entries, 1)
		assert.NotContains(t, a.verdicts.entries, big.GetUID())
	})
}

// A verdict with a failure in it stands only for failedVerdictTTL; others stand until
// their inputs or the engine change.
func TestVerdictsExpireOnlyWhenFailed(t *testing.T) {
	engine, err := policies.NewEngine(t.Context(), policies.Options{})
	require.NoError(t, err)
	version := engine.Version()
	now := time.Now()
	inputs := sha256.Sum256([]byte("inputs"))
	var m verdicts
	m.keep("ok", verdict{inputs: inputs, engine: version, found: []policies.Violation{{Message: "too big"}}})
	m.keep("failed", verdict{inputs: inputs, engine: version, found: []policies.Violation{{Message: "did not render", Failed: true}}, expires: now.Add(failedVerdictTTL)})

	for _, at := range []time.Time{now, now.Add(failedVerdictTTL - time.Second)} {
		_, ok := m.recall("failed", inputs, version, at)
		assert.True(t, ok)
	}
	_, ok := m.recall("failed", inputs, version, now.Add(failedVerdictTTL))
	assert.False(t, ok, "a failed verdict is tried again after its TTL")
	_, ok = m.recall("ok", inputs, version, now.Add(24*time.Hour))
	assert.True(t, ok)
	_, ok = m.recall("ok", sha256.Sum256([]byte("other inputs")), version, now)
	assert.False(t, ok)
	_, ok = m.recall("ok", inputs, policies.Version{}, now)
	assert.False(t, ok, "another engine version judges again")
}

func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	require.NoError(t, c.Write(&m))
	return m.GetCounter().GetValue()
}

func ptr[T any](v T) *T { return &v }

// The cluster's capabilities, read again, are the same when its APIs are: Helm gathers
// them in a map, and a new order each read would change the audit's key of every
// composition (capabilitiesDigest), judging all of them again every read, and miss
// admission's render memo.
func TestTheClusterCapabilitiesReadAgainAreTheSame(t *testing.T) {
	cp := controlplane.Start(t)
	dc, err := discovery.NewDiscoveryClientForConfig(cp.Config)
	require.NoError(t, err)
	read := func() *chartcommon.Capabilities {
		caps, err := policies.NewClusterCapabilities(memory.NewMemCacheClient(dc)).Get(t.Context())
		require.NoError(t, err)
		return caps
	}
	first := read()
	require.Greater(t, len(first.APIVersions), 50, "the API server serves its built-in APIs")
	assert.True(t, slices.IsSorted(first.APIVersions), "listed in order")
	for range 5 {
		again := read()
		assert.Equal(t, first.APIVersions, again.APIVersions)
		assert.Equal(t, capabilitiesDigest(first), capabilitiesDigest(again))
	}
}
