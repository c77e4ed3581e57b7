package policies

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	chartcommon "helm.sh/helm/v4/pkg/chart/common"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/compositor-dev/compositor/api/policy/v1alpha1"
	"github.com/compositor-dev/compositor/policies/gatekeeper"
)

// What Render gives is what Helm sends: the release manifest's objects labelled
// app.kubernetes.io/managed-by=Helm over the chart's own value and annotated with the
// release, the hooks annotated only (as the install gate marks them); the chart's
// other labels and annotations kept.
func TestRenderGivesTheObjectsAsHelmSendsThem(t *testing.T) {
	ch := &chart.Chart{
		Metadata: &chart.Metadata{APIVersion: chart.APIVersionV2, Name: "owned", Version: "0.1.0"},
		Templates: []*chartcommon.File{
			{Name: "templates/cm.yaml", Data: []byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm\n  labels: {app.kubernetes.io/managed-by: Tiller, team: a}\n  annotations: {meta.helm.sh/release-name: forged, note: kept}\n")},
			{Name: "templates/hook.yaml", Data: []byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: hook\n  annotations: {helm.sh/hook: pre-install}\n")},
		},
	}
	objs, err := Render(ch, nil, RenderOptions{ReleaseName: "rel", Namespace: "team-a"})
	require.NoError(t, err)
	require.Len(t, objs, 2)
	byName := map[string]map[string]any{}
	for _, o := range objs {
		byName[o.Object["metadata"].(map[string]any)["name"].(string)] = o.Object["metadata"].(map[string]any)
	}
	assert.Equal(t, map[string]any{"app.kubernetes.io/managed-by": "Helm", "team": "a"}, byName["cm"]["labels"])
	assert.Equal(t, map[string]any{"meta.helm.sh/release-name": "rel", "meta.helm.sh/release-namespace": "team-a", "note": "kept"}, byName["cm"]["annotations"])
	assert.NotContains(t, byName["hook"], "labels", "Helm labels no hook")
	assert.Equal(t, map[string]any{"helm.sh/hook": "pre-install", "meta.helm.sh/release-name": "rel", "meta.helm.sh/release-namespace": "team-a"}, byName["hook"]["annotations"])
}

// HelmOwned leaves the object it is given as it was.
func TestHelmOwnedChangesACopy(t *testing.T) {
	obj := map[string]any{"kind": "ConfigMap", "metadata": map[string]any{"name": "cm", "labels": map[string]any{"a": "b"}}}
	owned := HelmOwned(obj, "rel", "ns", false)
	assert.Equal(t, map[string]any{"kind": "ConfigMap", "metadata": map[string]any{"name": "cm", "labels": map[string]any{"a": "b"}}}, obj)
	assert.Equal(t, "Helm", owned["metadata"].(map[string]any)["labels"].(map[string]any)[LabelManagedBy])
}

// A constraint selecting what Helm manages by Helm's own label judges the chart's
// objects, as Gatekeeper does when Helm creates them; one requiring the label finds it.
func TestConstraintsSeeHelmsOwnershipMetadata(t *testing.T) {
	ch := &chart.Chart{
		Metadata:  &chart.Metadata{APIVersion: chart.APIVersionV2, Name: "owned", Version: "0.1.0"},
		Templates: []*chartcommon.File{{Name: "templates/cm.yaml", Data: []byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm\n")}},
	}
	e := newTestEngine(t, Options{})
	e.SetConstraints(OriginObject, gatekeeper.NewLibrary([]*gatekeeper.Template{testTemplate(t, echoTemplate)},
		[]*gatekeeper.Constraint{testConstraint(t, "TestEcho", "helm-managed", `{match: {kinds: [{apiGroups: [""], kinds: [ConfigMap]}], labelSelector: {matchLabels: {app.kubernetes.io/managed-by: Helm}}}}`)}))
	r := compositionRequest(map[string]any{})
	r.Chart = ch
	assert.Equal(t, []string{"deny ConfigMap/cm: ConfigMap team-a/cm op=CREATE user= [constraint TestEcho/helm-managed]"}, messages(e.Evaluate(context.Background(), r)))
}

// An object of a cluster-scoped kind is judged without a namespace, whatever its
// metadata.namespace says: the API server drops it, and Gatekeeper judges the object
// cluster-wide.
func TestAClusterScopedObjectIsJudgedWithoutItsNamespace(t *testing.T) {
	for _, match := range []string{
		"{match: {scope: Cluster, kinds: [{apiGroups: [networking.k8s.io], kinds: [IngressClass]}]}}",
		"{match: {excludedNamespaces: [team-a], kinds: [{apiGroups: [networking.k8s.io], kinds: [IngressClass]}]}}",
		"{match: {scope: Cluster, kinds: [{apiGroups: [example.com], kinds: [Zone]}]}}",
	} {
		e := newTestEngine(t, Options{})
		e.SetConstraints(OriginObject, gatekeeper.NewLibrary([]*gatekeeper.Template{testTemplate(t, echoTemplate)},
			[]*gatekeeper.Constraint{testConstraint(t, "TestEcho", "cluster", match)}))
		r := compositionRequest(map[string]any{})
		r.ClusterScoped = map[schema.GroupKind]bool{{Group: "example.com", Kind: "Zone"}: true}
		for _, md := range []map[string]any{{"name": "c"}, {"name": "c", "namespace": "team-a"}, {"name": "c", "namespace": "elsewhere"}} {
			r.Rendered = []RenderedObject{
				{Object: map[string]any{"apiVersion": "networking.k8s.io/v1", "kind": "IngressClass", "metadata": md}},
				{Object: map[string]any{"apiVersion": "example.com/v1", "kind": "Zone", "metadata": md}},
			}
			got := messages(e.Evaluate(context.Background(), r))
			require.Len(t, got, 1, "%s, metadata %v: %q", match, md, got)
			assert.Contains(t, got[0], " -/c ", "judged without a namespace: %s, metadata %v", match, md)
		}
	}
}

// An object rendered into another namespace is refused, as the install gate refuses
// it, and judged by nothing: the writer learns nothing of what is in force there, not
// even which constraints a namespaceSelector scopes.
func TestAnObjectOutsideTheNamespaceIsRefusedUnjudged(t *testing.T) {
	e := newTestEngine(t, Options{})
	e.SetConstraints(OriginObject, gatekeeper.NewLibrary([]*gatekeeper.Template{testTemplate(t, echoTemplate)},
		[]*gatekeeper.Constraint{
			testConstraint(t, "TestEcho", "payroll-registry", `{match: {namespaces: [payroll], kinds: [{apiGroups: [""], kinds: [ConfigMap]}]}}`),
			testConstraint(t, "TestEcho", "pci-zone", `{match: {namespaceSelector: {matchLabels: {zone: pci}}, kinds: [{apiGroups: [""], kinds: [ConfigMap]}]}}`),
			testConstraint(t, "TestEcho", "team-a-only", `{match: {namespaces: [team-a], kinds: [{apiGroups: [""], kinds: [ConfigMap]}]}}`),
		}))
	require.NoError(t, e.Set(context.Background(), Policy{Name: "echo", Target: v1alpha1.TargetRendered, Rego: `package compositor.echo

deny contains {"msg": sprintf("rendered %v", [obj.metadata.name])} if {
	some obj in input.rendered
}
`}))
	r := compositionRequest(map[string]any{})
	r.NamespaceLabels = map[string]string{"kubernetes.io/metadata.name": "team-a"}
	r.Rendered = []RenderedObject{
		{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "probe", "namespace": "payroll"}}},
		{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "home"}}},
	}
	got := messages(e.Evaluate(context.Background(), r))
	assert.Contains(t, got, "deny ConfigMap/probe: rendered into namespace payroll, outside the composition's namespace team-a: nothing is installed outside it [install gate]")
	assert.Contains(t, got, "deny ConfigMap/home: ConfigMap team-a/home op=CREATE user= [constraint TestEcho/team-a-only]", "the objects that stay are judged")
	for _, m := range got {
		assert.False(t, strings.Contains(m, "payroll-registry") || strings.Contains(m, "pci-zone") || strings.Contains(m, "rendered probe"), "judged though it leaves the namespace: %s", m)
	}
	assert.Len(t, got, 3, "%q", got)
}

// HelmOwned reads the chart's labels and annotations as Helm's accessor does before
// it writes its own back, which is what the cluster gets.
func TestHelmOwnedReadsMetadataAsHelmDoes(t *testing.T) {
	for _, tc := range []struct {
		name         string
		labels, want any
	}{
		{"strings", map[string]any{"a": "b"}, map[string]any{"a": "b", LabelManagedBy: ManagedByHelm}},
		{"a null value is empty", map[string]any{"version": nil}, map[string]any{"version": "", LabelManagedBy: ManagedByHelm}},
		{"a value that is no string drops them all", map[string]any{"on": true, "a": "b"}, map[string]any{LabelManagedBy: ManagedByHelm}},
		{"no map", "labels", map[string]any{LabelManagedBy: ManagedByHelm}},
		{"null", nil, map[string]any{LabelManagedBy: ManagedByHelm}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			obj := map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "cm", "labels": tc.labels}}
			owned := HelmOwned(obj, "rel", "ns", false)
			assert.Equal(t, tc.want, owned["metadata"].(map[string]any)["labels"])

			// Helm's own: the accessor, then its merge, on the same object.
			u := &unstructured.Unstructured{Object: runtime.DeepCopyJSON(obj)}
			labels := u.GetLabels()
			if labels == nil {
				labels = map[string]string{}
			}
			labels[LabelManagedBy] = ManagedByHelm
			u.SetLabels(labels)
			assert.Equal(t, u.Object["metadata"].(map[string]any)["labels"], owned["metadata"].(map[string]any)["labels"])
		})
	}
}
